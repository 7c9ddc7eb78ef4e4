// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/json_text.h"

#include <fmt/format.h>

#include <string>
#include <unordered_set>
#include <vector>

namespace bexd::cli {
namespace {

constexpr int kIndent = 4;

struct TooDeep {};
struct DuplicateKey {
  std::string key;
};

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
  using Event = nlohmann::json::parse_event_t;
  // The keys of each object being read, innermost last. nlohmann keeps the last of repeated
  // keys; QEMU refuses them, and so does bexd rather than silently drop a value.
  std::vector<std::unordered_set<std::string>> keys;
  // The callback sees each container open with the number of containers around it.
  auto check = [&keys](int depth, Event event, nlohmann::json& parsed) {
    const bool opens = event == Event::object_start || event == Event::array_start;
    if (opens && depth >= kMaxJsonDepth) throw TooDeep();
    if (event == Event::object_start) keys.emplace_back();
    if (event == Event::object_end) keys.pop_back();
    if (event == Event::key && !keys.back().insert(parsed.get<std::string>()).second) {
      throw DuplicateKey{parsed.get<std::string>()};
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, check);
  } catch (const TooDeep&) {
    return absl::InvalidArgumentError(JsonDepthError());
  } catch (const DuplicateKey& duplicate) {
    return absl::InvalidArgumentError(
        fmt::format("invalid JSON: duplicate key '{}'", duplicate.key));
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
