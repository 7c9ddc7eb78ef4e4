// SPDX-License-Identifier: GPL-2.0-or-later
// vhost_bench: requests per second through a vhost-user-fs export, measured with the test
// frontend (vhost_frontend/frontend.h) in place of QEMU and a guest kernel, so the number is the
// backend's: ring handling, the FUSE core and the block driver, with no guest in the way.
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "perf/vhost_bench_options.h"
#include "perf/vhost_bench_run.h"

int main(int argc, char** argv) {
  using namespace bexd::perf;
  const std::span<char* const> args(argv + 1, argc - 1);
  if (args.size() == 1 && (std::string_view(args[0]) == "--help")) {
    fputs(VhostBenchUsage(), stdout);
    return 0;
  }
  absl::StatusOr<VhostBenchOptions> options = ParseVhostBenchOptions(args);
  if (!options.ok()) {
    fmt::print(stderr, "vhost_bench: {}\n{}", std::string(options.status().message()),
               VhostBenchUsage());
    return 2;
  }
  absl::StatusOr<VhostBenchResult> result = RunVhostBench(*options);
  if (!result.ok()) {
    fmt::print(stderr, "vhost_bench: {}\n", std::string(result.status().message()));
    return 1;
  }
  // The keys of fio's per-job numbers the harness reads, so both kinds of cells share its tables.
  const double iops = result->requests / result->seconds;
  fmt::print(
      "{{\"iops\": {:.1f}, \"bw_kib\": {:.1f}, \"ios\": {}, \"lat_mean_us\": {:.2f}, "
      "\"lat_p99_us\": {:.1f}, \"client_usr_pct\": {:.1f}, \"client_sys_pct\": {:.1f}, "
      "\"queues\": {}, \"requests_per_queue\": [{}]}}\n",
      iops, iops * options->block_size / 1024, result->requests, result->latency_mean_us,
      result->latency_p99_us, result->client_user_pct, result->client_system_pct,
      options->request_queues, fmt::join(result->requests_per_ring, ", "));
  return 0;
}
