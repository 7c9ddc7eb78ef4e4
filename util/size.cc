// SPDX-License-Identifier: GPL-2.0-or-later
#include "util/size.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>

namespace bexd::util {

absl::StatusOr<uint64_t> ParseSize(std::string_view text) {
  static constexpr std::string_view kSuffixes = "kmgtpe";
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [next, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || text.front() < '0' || text.front() > '9' || next == text.data()) {
    return absl::InvalidArgumentError(fmt::format("'{}' is not a number", text));
  }
  if (error == std::errc::result_out_of_range) {
    return absl::OutOfRangeError(fmt::format("'{}' is larger than 2^64 - 1", text));
  }
  if (next == end) return value;
  const std::string_view suffix(next, static_cast<size_t>(end - next));
  const size_t steps =
      suffix.size() == 1 ? kSuffixes.find(static_cast<char>(suffix.front() | 0x20)) : suffix.npos;
  if (steps == std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format(
        "'{}' has an unknown suffix '{}' (use k, M, G, T, P or E, powers of 1024)", text, suffix));
  }
  for (size_t i = 0; i <= steps; ++i) {
    if (value > std::numeric_limits<uint64_t>::max() / 1024) {
      return absl::OutOfRangeError(fmt::format("'{}' is larger than 2^64 - 1", text));
    }
    value *= 1024;
  }
  return value;
}

}  // namespace bexd::util
