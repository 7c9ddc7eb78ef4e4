// SPDX-License-Identifier: GPL-2.0-or-later
// Command line of vhost_bench.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <span>
#include <string>

namespace bexd::perf {

enum class BenchPattern { kRead, kWrite, kRandRead, kRandWrite };

struct VhostBenchOptions {
  std::string socket_path;      // the export's vhost-user socket
  std::string file_name;        // the exported file in the virtio-fs root
  uint32_t request_queues = 1;  // one frontend thread per request ring
  uint32_t iodepth = 16;        // requests kept in flight per ring
  uint32_t block_size = 4096;
  // OPEN asks for O_DIRECT, as a guest's fio --direct=1 does. A backend that honours it (virtiofsd
  // with allow_direct_io) then bypasses the host page cache; bexd's node options decide that.
  bool direct = false;
  BenchPattern pattern = BenchPattern::kRandRead;
  double runtime_s = 5;
  double ramp_s = 1;  // run but not counted, before the measured window
};

bool IsWrite(BenchPattern pattern);
bool IsRandom(BenchPattern pattern);

// Parses argv[1..]; options are "--name=value" or "--name value".
absl::StatusOr<VhostBenchOptions> ParseVhostBenchOptions(std::span<char* const> args);

const char* VhostBenchUsage();

}  // namespace bexd::perf
