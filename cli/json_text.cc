#include "cli/json_text.h"

#include <fmt/format.h>

#include <string>

namespace bexd::cli {

absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text) {
  try {
    return nlohmann::json::parse(text);
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
  return value.dump(pretty ? 4 : -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace bexd::cli
