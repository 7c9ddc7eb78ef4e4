// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuse/queue_stats.h"

namespace bexd::fuse {

QueueStatsSnapshot QueueStatsSnapshot::Of(const QueueStats& stats) {
  QueueStatsSnapshot s;
  s.requests = stats.requests.load(std::memory_order_relaxed);
  s.read_requests = stats.read_requests.load(std::memory_order_relaxed);
  s.write_requests = stats.write_requests.load(std::memory_order_relaxed);
  s.bytes_read = stats.bytes_read.load(std::memory_order_relaxed);
  s.bytes_written = stats.bytes_written.load(std::memory_order_relaxed);
  s.errors = stats.errors.load(std::memory_order_relaxed);
  s.in_flight = stats.in_flight.load(std::memory_order_relaxed);
  for (int i = 0; i < QueueStats::kLatencyBuckets; ++i) {
    s.latency_us[i] = stats.latency_us[i].load(std::memory_order_relaxed);
  }
  return s;
}

uint64_t QueueStatsSnapshot::LatencyPercentileUs(double percentile) const {
  uint64_t total = 0;
  for (uint64_t count : latency_us) total += count;
  if (total == 0) return 0;
  const double wanted = total * percentile / 100.0;
  uint64_t seen = 0;
  for (int i = 0; i < QueueStats::kLatencyBuckets; ++i) {
    seen += latency_us[i];
    if (seen >= wanted && seen > 0) return uint64_t{1} << (i + 1);
  }
  return uint64_t{1} << QueueStats::kLatencyBuckets;
}

}  // namespace bexd::fuse
