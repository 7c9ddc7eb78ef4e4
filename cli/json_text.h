#pragma once

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include <string_view>

namespace bexd::cli {

// Parses one JSON document; the error says where and why it is not valid JSON (including invalid
// UTF-8), without the library's exception prefix.
absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text);

// Serialises for replies and messages; invalid UTF-8 in strings becomes U+FFFD.
std::string DumpJson(const nlohmann::json& value, bool pretty = false);

}  // namespace bexd::cli
