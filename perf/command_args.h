// SPDX-License-Identifier: GPL-2.0-or-later
// Command-line pieces shared by the perf/ tools: "--name=value" / "--name value" splitting and
// numbers with binary suffixes.
#pragma once

#include <absl/status/statusor.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace bexd::perf {

struct CommandOption {
  std::string_view name;  // without the leading "--"
  std::string_view value;
};

// Takes the option at args[*i] (and its value from the next argument if it has no '='),
// advancing *i past what it used.
absl::StatusOr<CommandOption> NextOption(std::span<char* const> args, size_t* i);

// An unsigned integer with an optional binary suffix (util/size.h), from `min` to `max`; `name` is
// the option it came from, for the error message.
absl::StatusOr<uint64_t> ParseNumber(std::string_view name, std::string_view text, uint64_t min,
                                     uint64_t max);

}  // namespace bexd::perf
