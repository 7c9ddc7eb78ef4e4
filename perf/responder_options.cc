// SPDX-License-Identifier: GPL-2.0-or-later
#include "perf/responder_options.h"

#include "perf/command_args.h"

#include <fmt/format.h>

#include <limits>
#include <string_view>

namespace bexd::perf {

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
  for (size_t i = 0; i < args.size();) {
    absl::StatusOr<CommandOption> option = NextOption(args, &i);
    if (!option.ok()) return option.status();
    const std::string_view name = option->name;
    const std::string_view value = option->value;
    if (name == "mountpoint") {
      options.mountpoint = value;
    } else if (name == "size") {
      absl::StatusOr<uint64_t> size =
          ParseNumber(name, value, 0, std::numeric_limits<int64_t>::max());
      if (!size.ok()) return size.status();
      options.config.file_size = *size;
    } else if (name == "queues") {
      absl::StatusOr<uint64_t> queues = ParseNumber(name, value, 1, kMaxQueues);
      if (!queues.ok()) return queues.status();
      options.queues = static_cast<uint32_t>(*queues);
    } else if (name == "max-background") {
      absl::StatusOr<uint64_t> max_background =
          ParseNumber(name, value, 1, std::numeric_limits<uint16_t>::max());
      if (!max_background.ok()) return max_background.status();
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
