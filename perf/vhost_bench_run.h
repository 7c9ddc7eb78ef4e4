// SPDX-License-Identifier: GPL-2.0-or-later
// The measurement of vhost_bench: one frontend, one thread per request ring, each keeping
// `iodepth` READ or WRITE requests in flight against the exported file.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <vector>

#include "perf/vhost_bench_options.h"

namespace bexd::perf {

struct VhostBenchResult {
  uint64_t requests = 0;  // completed inside the measured window, all rings
  double seconds = 0;     // length of the measured window
  double latency_mean_us = 0;
  double latency_p99_us = 0;
  double client_user_pct = 0;  // this process's CPU over the window, % of one CPU
  double client_system_pct = 0;
  std::vector<uint64_t> requests_per_ring;
};

// Connects, runs ramp + runtime, and stops every ring with nothing left in flight. Any failed
// request (error reply, short reply, timeout) fails the run: a benchmark of errors means nothing.
absl::StatusOr<VhostBenchResult> RunVhostBench(const VhostBenchOptions& options);

}  // namespace bexd::perf
