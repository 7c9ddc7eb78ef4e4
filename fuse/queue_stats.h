// SPDX-License-Identifier: GPL-2.0-or-later
// Per-queue counters. Written only by the queue's own thread (relaxed stores, no lock on the I/O
// path); read from any thread for query-stats.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace bexd::fuse {

struct QueueStats {
  // Latency buckets: bucket i counts requests that took [2^i, 2^(i+1)) microseconds.
  static constexpr int kLatencyBuckets = 32;

  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> read_requests{0};
  std::atomic<uint64_t> write_requests{0};
  std::atomic<uint64_t> bytes_read{0};
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint32_t> in_flight{0};
  std::atomic<uint64_t> latency_us[kLatencyBuckets] = {};
};

// Adds to a counter from the queue's own thread: the only writer, so a relaxed load and store is
// enough and avoids a locked read-modify-write per request.
template <typename T>
inline void AddOnOwnerThread(std::atomic<T>& counter, T amount) {
  counter.store(counter.load(std::memory_order_relaxed) + amount, std::memory_order_relaxed);
}

// A consistent-enough copy for reporting.
struct QueueStatsSnapshot {
  uint64_t requests = 0, read_requests = 0, write_requests = 0;
  uint64_t bytes_read = 0, bytes_written = 0, errors = 0;
  uint32_t in_flight = 0;
  uint64_t latency_us[QueueStats::kLatencyBuckets] = {};

  static QueueStatsSnapshot Of(const QueueStats& stats);
  // Latency (µs, upper bucket bound) below which `percentile` (0-100) of the requests finished.
  uint64_t LatencyPercentileUs(double percentile) const;
};

}  // namespace bexd::fuse
