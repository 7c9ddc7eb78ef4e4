#include "perf/responder_options.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <string_view>

namespace bexd::perf {
namespace {

// An unsigned integer with an optional binary suffix (K, M, G, T), at most `max`.
absl::StatusOr<uint64_t> ParseNumber(std::string_view name, std::string_view text, uint64_t max) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [next, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || next == text.data()) {
    return absl::InvalidArgumentError(fmt::format("--{}: '{}' is not a number", name, text));
  }
  int shift = 0;
  if (next != end) {
    const std::string_view suffix(next, end - next);
    if (suffix == "K" || suffix == "k") {
      shift = 10;
    } else if (suffix == "M") {
      shift = 20;
    } else if (suffix == "G") {
      shift = 30;
    } else if (suffix == "T") {
      shift = 40;
    } else {
      return absl::InvalidArgumentError(
          fmt::format("--{}: unknown suffix '{}' (use K, M, G or T)", name, suffix));
    }
  }
  if (value > (std::numeric_limits<uint64_t>::max() >> shift) || (value << shift) > max) {
    return absl::InvalidArgumentError(
        fmt::format("--{}: '{}' is larger than the maximum {}", name, text, max));
  }
  return value << shift;
}

}  // namespace

const char* ResponderUsage() {
  return "usage: limit_responder --mountpoint=FILE [--size=BYTES] [--queues=N]\n"
         "                       [--max-background=N] [--log-level=error|warn|info|debug]\n"
         "Mounts a FUSE file on FILE (an existing regular file) that reads as zeroes and\n"
         "discards writes, answering every request at once on N queues (the /dev/fuse fd and\n"
         "N-1 clones, one thread each). Stops on SIGTERM or SIGINT.\n"
         "  --size            file size, with optional K/M/G/T suffix (default 1G)\n"
         "  --queues          1 to 256 (default 1)\n"
         "  --max-background  asynchronous requests the kernel keeps in flight (default 256)\n";
}

absl::StatusOr<ResponderOptions> ParseResponderOptions(std::span<char* const> args) {
  ResponderOptions options;
  options.config.file_size = uint64_t{1} << 30;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (!arg.starts_with("--")) {
      return absl::InvalidArgumentError(fmt::format("unexpected argument '{}'", arg));
    }
    arg.remove_prefix(2);
    std::string_view name = arg;
    std::string_view value;
    if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(fmt::format("--{} needs a value", name));
    }
    if (name == "mountpoint") {
      options.mountpoint = value;
    } else if (name == "size") {
      absl::StatusOr<uint64_t> size = ParseNumber(name, value, std::numeric_limits<int64_t>::max());
      if (!size.ok()) return size.status();
      options.config.file_size = *size;
    } else if (name == "queues") {
      absl::StatusOr<uint64_t> queues = ParseNumber(name, value, kMaxQueues);
      if (!queues.ok()) return queues.status();
      if (*queues == 0) return absl::InvalidArgumentError("--queues must be at least 1");
      options.queues = static_cast<uint32_t>(*queues);
    } else if (name == "max-background") {
      absl::StatusOr<uint64_t> max_background =
          ParseNumber(name, value, std::numeric_limits<uint16_t>::max());
      if (!max_background.ok()) return max_background.status();
      if (*max_background == 0) {
        return absl::InvalidArgumentError("--max-background must be at least 1");
      }
      options.config.max_background = static_cast<uint16_t>(*max_background);
    } else if (name == "log-level") {
      if (!log::ParseLevel(value, &options.log_level)) {
        return absl::InvalidArgumentError(
            fmt::format("--log-level: '{}' is not error, warn, info or debug", value));
      }
    } else {
      return absl::InvalidArgumentError(fmt::format("unknown option --{}", name));
    }
  }
  if (options.mountpoint.empty()) return absl::InvalidArgumentError("--mountpoint is required");
  return options;
}

}  // namespace bexd::perf
