// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/json_text.h"

#include <fmt/format.h>

#include <string>

namespace bexd::cli {
namespace {

constexpr int kIndent = 4;

struct TooDeep {};

// The bytes of indentation the pretty form of `value` takes, at `depth`; stops counting past
// kMaxIndentationBytes.
size_t IndentationBytes(const nlohmann::json& value, size_t depth) {
  if (!value.is_structured() || value.empty()) return 0;
  size_t bytes = depth * kIndent;  // before the closing bracket
  for (const nlohmann::json& element : value) {
    bytes += (depth + 1) * kIndent + IndentationBytes(element, depth + 1);
    if (bytes > kMaxIndentationBytes) break;
  }
  return bytes;
}

}  // namespace

std::string JsonDepthError() {
  return fmt::format("JSON nesting depth limit exceeded (at most {} levels)", kMaxJsonDepth);
}

absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text) {
  // The callback sees each container open with the number of containers around it.
  auto limit_depth = [](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    bool opens = event == nlohmann::json::parse_event_t::object_start ||
                 event == nlohmann::json::parse_event_t::array_start;
    if (opens && depth >= kMaxJsonDepth) throw TooDeep();
    return true;
  };
  try {
    return nlohmann::json::parse(text, limit_depth);
  } catch (const TooDeep&) {
    return absl::InvalidArgumentError(JsonDepthError());
  } catch (const nlohmann::json::exception& error) {
    std::string_view message = error.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> "line 1, ..."
    if (size_t end = message.find("] "); end != std::string_view::npos) {
      message.remove_prefix(end + 2);
    }
    if (message.starts_with("parse error at ")) message.remove_prefix(15);
    return absl::InvalidArgumentError(fmt::format("invalid JSON: {}", message));
  }
}

std::string DumpJson(const nlohmann::json& value, bool pretty) {
  if (pretty && IndentationBytes(value, 0) > kMaxIndentationBytes) pretty = false;
  return value.dump(pretty ? kIndent : -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace bexd::cli
