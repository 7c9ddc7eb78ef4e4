// SPDX-License-Identifier: GPL-2.0-or-later
#pragma once

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace bexd::cli {

// The deepest nesting of objects and arrays accepted in any JSON input, as in QEMU's JSON parser:
// it bounds the recursion that copying, comparing and printing a value needs.
inline constexpr int kMaxJsonDepth = 1024;
// The error for input nested deeper, in QEMU's words.
std::string JsonDepthError();

// Parses one JSON document; the error says where and why it is not valid JSON (including invalid
// UTF-8 and nesting deeper than kMaxJsonDepth), without the library's exception prefix.
absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text);

// Serialises for replies and messages; invalid UTF-8 in strings becomes U+FFFD. A pretty form
// whose indentation alone would exceed kMaxIndentationBytes (deep nesting with many elements
// multiplies it) is written compact instead.
inline constexpr size_t kMaxIndentationBytes = 1 << 20;
std::string DumpJson(const nlohmann::json& value, bool pretty = false);

}  // namespace bexd::cli
