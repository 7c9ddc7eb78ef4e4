#include "perf/command_args.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>

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
  if ((value << shift) < min) {
    return absl::InvalidArgumentError(fmt::format("--{} must be at least {}", name, min));
  }
  return value << shift;
}

}  // namespace bexd::perf
