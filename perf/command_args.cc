// SPDX-License-Identifier: GPL-2.0-or-later
#include "perf/command_args.h"

#include <fmt/format.h>

#include "util/size.h"

namespace bexd::perf {

absl::StatusOr<CommandOption> NextOption(std::span<char* const> args, size_t* i) {
  std::string_view arg = args[*i];
  if (!arg.starts_with("--")) {
    return absl::InvalidArgumentError(fmt::format("unexpected argument '{}'", arg));
  }
  arg.remove_prefix(2);
  CommandOption option{arg, {}};
  if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
    option.name = arg.substr(0, eq);
    option.value = arg.substr(eq + 1);
  } else if (*i + 1 < args.size()) {
    option.value = args[++*i];
  } else {
    return absl::InvalidArgumentError(fmt::format("--{} needs a value", option.name));
  }
  ++*i;
  return option;
}

absl::StatusOr<uint64_t> ParseNumber(std::string_view name, std::string_view text, uint64_t min,
                                     uint64_t max) {
  absl::StatusOr<uint64_t> value = util::ParseSize(text);
  if (!value.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--{}: {}", name, std::string(value.status().message())));
  }
  if (*value > max) {
    return absl::InvalidArgumentError(
        fmt::format("--{}: '{}' is larger than the maximum {}", name, text, max));
  }
  if (*value < min) {
    return absl::InvalidArgumentError(fmt::format("--{} must be at least {}", name, min));
  }
  return *value;
}

}  // namespace bexd::perf
