// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/keyval.h"

#include <absl/strings/ascii.h>
#include <fmt/format.h>

#include <string>
#include <vector>

namespace bexd::cli {
namespace {

using nlohmann::json;

bool IsKeySegment(std::string_view segment) {
  if (segment.empty()) return false;
  for (char c : segment) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  }
  return true;
}

bool IsListIndex(std::string_view segment) {
  if (segment.empty() || segment.size() > 9) return false;
  for (char c : segment) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return segment.size() == 1 || segment[0] != '0';
}

// Reads a value starting at `pos` up to the next single comma; ",," yields a comma.
std::string ReadValue(std::string_view text, size_t* pos) {
  std::string value;
  size_t i = *pos;
  while (i < text.size()) {
    if (text[i] == ',') {
      if (i + 1 < text.size() && text[i + 1] == ',') {
        value.push_back(',');
        i += 2;
        continue;
      }
      break;
    }
    value.push_back(text[i++]);
  }
  *pos = i;
  return value;
}

absl::Status Insert(json* root, std::string_view key, std::string value) {
  std::vector<std::string_view> segments;
  for (size_t start = 0;;) {
    size_t dot = key.find('.', start);
    segments.push_back(key.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  json* node = root;
  std::string path;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (!IsKeySegment(segments[i])) {
      return absl::InvalidArgumentError(fmt::format("invalid key '{}'", key));
    }
    if (!path.empty()) path += '.';
    path += segments[i];
    std::string segment(segments[i]);
    bool last = i + 1 == segments.size();
    auto it = node->find(segment);
    if (last) {
      if (it != node->end()) {
        return absl::InvalidArgumentError(
            it->is_object() ? fmt::format("'{}' is both a value and a group of keys", key)
                            : fmt::format("key '{}' is given more than once", key));
      }
      (*node)[segment] = std::move(value);
      return absl::OkStatus();
    }
    if (it == node->end()) {
      node = &((*node)[segment] = json::object());
    } else if (it->is_object()) {
      node = &*it;
    } else {
      return absl::InvalidArgumentError(
          fmt::format("'{}' is both a value and a group of keys", path));
    }
  }
  return absl::OkStatus();
}

// Turns every object below the top whose keys are all list indexes into a list; the indexes must
// be 0..n-1.
absl::Status ConvertLists(json* node, const std::string& path) {
  if (!node->is_object() || node->empty()) return absl::OkStatus();
  bool all_indexes = true;
  for (auto& [key, child] : node->items()) {
    absl::Status status =
        ConvertLists(&child, path.empty() ? key : fmt::format("{}.{}", path, key));
    if (!status.ok()) return status;
    if (!IsListIndex(key)) all_indexes = false;
  }
  if (!all_indexes || path.empty()) {
    for (auto& [key, child] : node->items()) {
      if (IsListIndex(key)) {
        return absl::InvalidArgumentError(
            path.empty() ? fmt::format("invalid key '{}'", key)
                         : fmt::format("'{}' mixes list indexes and names", path));
      }
    }
    return absl::OkStatus();
  }
  json list = json::array();
  for (size_t i = 0; i < node->size(); ++i) {
    auto it = node->find(std::to_string(i));
    if (it == node->end()) {
      return absl::InvalidArgumentError(
          fmt::format("list '{}' has no element {} (indexes must be 0..n-1)", path, i));
    }
    list.push_back(std::move(*it));
  }
  *node = std::move(list);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<json> ParseKeyval(std::string_view text, std::string_view implied_key) {
  json root = json::object();
  size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    size_t end = text.find_first_of("=,", pos);
    if (end == std::string_view::npos || text[end] == ',') {
      if (!first || implied_key.empty()) {
        std::string_view element =
            text.substr(pos, end == std::string_view::npos ? end : end - pos);
        if (element.empty()) return absl::InvalidArgumentError("empty element between commas");
        return absl::InvalidArgumentError(fmt::format("expected key=value, got '{}'", element));
      }
      std::string value = ReadValue(text, &pos);
      absl::Status status = Insert(&root, implied_key, std::move(value));
      if (!status.ok()) return status;
    } else {
      std::string_view key = text.substr(pos, end - pos);
      if (key.empty()) return absl::InvalidArgumentError("empty key before '='");
      pos = end + 1;
      std::string value = ReadValue(text, &pos);
      absl::Status status = Insert(&root, key, std::move(value));
      if (!status.ok()) return status;
    }
    first = false;
    if (pos < text.size()) {
      ++pos;  // the separating comma
      if (pos == text.size()) return absl::InvalidArgumentError("trailing comma");
    }
  }
  absl::Status status = ConvertLists(&root, "");
  if (!status.ok()) return status;
  return root;
}

}  // namespace bexd::cli
