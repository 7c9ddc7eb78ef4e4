// SPDX-License-Identifier: GPL-2.0-or-later
#include "perf/vhost_bench_options.h"

#include <fmt/format.h>

#include <charconv>
#include <string_view>

#include "perf/command_args.h"

namespace bexd::perf {
namespace {

constexpr uint32_t kMaxRequestQueues = 64;
constexpr uint32_t kMaxIodepth = 256;  // a power of two; the ring holds 4 descriptors per slot
constexpr uint32_t kMaxBlockSize = 1 << 20;

absl::StatusOr<double> ParseSeconds(std::string_view name, std::string_view text, double min) {
  double value = 0;
  auto [next, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || next != text.data() + text.size() || !(value >= min) ||
      value > 86400) {
    return absl::InvalidArgumentError(
        fmt::format("--{}: '{}' is not a number of seconds from {} to 86400", name, text, min));
  }
  return value;
}

}  // namespace

bool IsWrite(BenchPattern pattern) {
  return pattern == BenchPattern::kWrite || pattern == BenchPattern::kRandWrite;
}

bool IsRandom(BenchPattern pattern) {
  return pattern == BenchPattern::kRandRead || pattern == BenchPattern::kRandWrite;
}

const char* VhostBenchUsage() {
  return "usage: vhost_bench --socket=PATH --file=NAME [--queues=N] [--rw=PATTERN]\n"
         "                   [--iodepth=N] [--bs=BYTES] [--direct=0|1] [--runtime=S]\n"
         "                   [--ramp=S]\n"
         "Connects to a vhost-user-fs backend as a vhost-user frontend (memfd guest memory,\n"
         "split rings), opens NAME in the virtio-fs root and keeps N request rings busy with\n"
         "READ or WRITE requests, one thread per ring. Prints one JSON object: requests per\n"
         "second, bandwidth, latency and the frontend's own CPU use over the measured window.\n"
         "  --queues   request rings, 1 to 64 (default 1); the backend must offer as many\n"
         "  --rw       read, write, randread or randwrite (default randread)\n"
         "  --iodepth  requests in flight per ring, a power of two up to 256 (default 16)\n"
         "  --bs       request size, a multiple of 512 up to 1M (default 4K)\n"
         "  --direct   1: OPEN the file with O_DIRECT, as fio --direct=1 in a guest does\n"
         "             (default 0)\n"
         "  --runtime  measured seconds (default 5)\n"
         "  --ramp     seconds run before the measured window (default 1)\n";
}

absl::StatusOr<VhostBenchOptions> ParseVhostBenchOptions(std::span<char* const> args) {
  VhostBenchOptions options;
  for (size_t i = 0; i < args.size();) {
    absl::StatusOr<CommandOption> option = NextOption(args, &i);
    if (!option.ok()) return option.status();
    const std::string_view name = option->name;
    const std::string_view value = option->value;
    if (name == "socket") {
      options.socket_path = value;
    } else if (name == "file") {
      options.file_name = value;
    } else if (name == "queues") {
      absl::StatusOr<uint64_t> queues = ParseNumber(name, value, 1, kMaxRequestQueues);
      if (!queues.ok()) return queues.status();
      options.request_queues = static_cast<uint32_t>(*queues);
    } else if (name == "iodepth") {
      absl::StatusOr<uint64_t> depth = ParseNumber(name, value, 1, kMaxIodepth);
      if (!depth.ok()) return depth.status();
      if ((*depth & (*depth - 1)) != 0) {
        return absl::InvalidArgumentError(
            fmt::format("--iodepth: {} is not a power of two (the ring size must be one)", value));
      }
      options.iodepth = static_cast<uint32_t>(*depth);
    } else if (name == "bs") {
      absl::StatusOr<uint64_t> bs = ParseNumber(name, value, 512, kMaxBlockSize);
      if (!bs.ok()) return bs.status();
      if (*bs % 512 != 0) {
        return absl::InvalidArgumentError(fmt::format("--bs: {} is not a multiple of 512", value));
      }
      options.block_size = static_cast<uint32_t>(*bs);
    } else if (name == "direct") {
      absl::StatusOr<uint64_t> direct = ParseNumber(name, value, 0, 1);
      if (!direct.ok()) return direct.status();
      options.direct = *direct == 1;
    } else if (name == "rw") {
      if (value == "read") {
        options.pattern = BenchPattern::kRead;
      } else if (value == "write") {
        options.pattern = BenchPattern::kWrite;
      } else if (value == "randread") {
        options.pattern = BenchPattern::kRandRead;
      } else if (value == "randwrite") {
        options.pattern = BenchPattern::kRandWrite;
      } else {
        return absl::InvalidArgumentError(
            fmt::format("--rw: '{}' is not read, write, randread or randwrite", value));
      }
    } else if (name == "runtime") {
      absl::StatusOr<double> seconds = ParseSeconds(name, value, 0.1);
      if (!seconds.ok()) return seconds.status();
      options.runtime_s = *seconds;
    } else if (name == "ramp") {
      absl::StatusOr<double> seconds = ParseSeconds(name, value, 0);
      if (!seconds.ok()) return seconds.status();
      options.ramp_s = *seconds;
    } else {
      return absl::InvalidArgumentError(fmt::format("unknown option --{}", name));
    }
  }
  if (options.socket_path.empty()) return absl::InvalidArgumentError("--socket is required");
  if (options.file_name.empty()) return absl::InvalidArgumentError("--file is required");
  return options;
}

}  // namespace bexd::perf
