// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/option_reader.h"

#include <charconv>
#include <cstdint>
#include <limits>

#include <absl/strings/ascii.h>
#include <fmt/format.h>

#include "cli/config/json_text.h"
#include "util/size.h"

namespace bexd::cli {
namespace {

using nlohmann::json;

const json& EmptyObject() {
  static const json* empty = new json(json::object());
  return *empty;
}

}  // namespace

OptionReader::OptionReader(const json& object, Syntax syntax, std::string path)
    : OptionReader(object, syntax, std::move(path), std::make_shared<absl::Status>()) {}

OptionReader::OptionReader(const json& object, Syntax syntax, std::string path,
                           std::shared_ptr<absl::Status> error)
    : object_(&object), syntax_(syntax), path_(std::move(path)), error_(std::move(error)) {
  if (!object.is_object()) {
    if (error_->ok()) {
      *error_ = absl::InvalidArgumentError(
          fmt::format("{}expected a JSON object, got {}",
                      path_.empty() ? "" : fmt::format("{}: ", path_), DumpJson(object)));
    }
    object_ = &EmptyObject();
  }
}

std::string OptionReader::Quote(std::string_view text) { return DumpJson(json(std::string(text))); }

std::string OptionReader::PathOf(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  if (key.empty()) return path_;
  return fmt::format("{}.{}", path_, key);
}

bool OptionReader::Has(std::string_view key) const { return object_->contains(key); }

std::optional<std::string> OptionReader::Peek(std::string_view key) const {
  auto it = object_->find(key);
  if (it == object_->end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

const json* OptionReader::Take(std::string_view key) {
  known_.emplace(key);
  if (!ok()) return nullptr;
  auto it = object_->find(key);
  return it == object_->end() ? nullptr : &*it;
}

void OptionReader::Fail(std::string_view key, std::string_view message) {
  if (ok()) *error_ = absl::InvalidArgumentError(fmt::format("{}: {}", PathOf(key), message));
}

void OptionReader::Fail(const absl::Status& status) {
  if (ok()) *error_ = status;
}

void OptionReader::Expected(std::string_view key, std::string_view what, const json& got) {
  Fail(key, fmt::format("expected {}, got {}", what, DumpJson(got)));
}

void OptionReader::String(std::string_view key, std::string* out) {
  const json* value = Take(key);
  if (value == nullptr) return;
  if (!value->is_string()) return Expected(key, "a string", *value);
  *out = value->get<std::string>();
}

void OptionReader::RequiredString(std::string_view key, std::string* out) {
  if (ok() && !Has(key)) {
    known_.emplace(key);
    return Fail(key, "missing (required)");
  }
  String(key, out);
  if (ok() && out->empty()) Fail(key, "must not be empty");
}

void OptionReader::Bool(std::string_view key, bool* out) {
  const json* value = Take(key);
  if (value == nullptr) return;
  if (syntax_ == Syntax::kJson) {
    if (!value->is_boolean()) return Expected(key, "true or false", *value);
    *out = value->get<bool>();
    return;
  }
  if (value->is_string()) {
    const std::string& text = value->get_ref<const std::string&>();
    // QEMU's keyval booleans (qapi_bool_parse).
    for (std::string_view yes : {"on", "yes", "true", "y"}) {
      if (text == yes) {
        *out = true;
        return;
      }
    }
    for (std::string_view no : {"off", "no", "false", "n"}) {
      if (text == no) {
        *out = false;
        return;
      }
    }
  }
  Expected(key, "on or off", *value);
}

bool OptionReader::ParseUnsigned(const json& value, bool allow_suffix, uint64_t* out) const {
  if (syntax_ == Syntax::kJson) {
    // The JSON parser keeps -0 as a signed integer; QEMU takes it as 0.
    if (value.is_number_integer() && !value.is_number_unsigned() && value.get<int64_t>() == 0) {
      *out = 0;
      return true;
    }
    if (!value.is_number_unsigned()) return false;
    *out = value.get<uint64_t>();
    return true;
  }
  if (!value.is_string()) return false;
  std::string_view text = value.get_ref<const std::string&>();
  if (allow_suffix) {
    absl::StatusOr<uint64_t> size = util::ParseSize(text);
    if (size.ok()) *out = *size;
    return size.ok();
  }
  if (text.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(text.front()))) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return error == std::errc() && end == text.data() + text.size();
}

void OptionReader::Size(std::string_view key, uint64_t* out) {
  const json* value = Take(key);
  if (value == nullptr) return;
  if (!ParseUnsigned(*value, /*allow_suffix=*/true, out)) {
    Expected(key,
             syntax_ == Syntax::kKeyval
                 ? "a size in bytes (an integer, optionally with a k, M, G, T, P or E suffix)"
                 : "a size in bytes (a non-negative integer)",
             *value);
    return;
  }
  // Block layers count bytes in int64_t (offsets, off_t, QEMU's sizes): more cannot be served.
  constexpr uint64_t kMaxSize = std::numeric_limits<int64_t>::max();
  if (*out > kMaxSize) Fail(key, fmt::format("must be at most {}, got {}", kMaxSize, *out));
}

void OptionReader::Integer(std::string_view key, uint64_t* out, uint64_t min, uint64_t max) {
  const json* value = Take(key);
  if (value == nullptr) return;
  uint64_t parsed = 0;
  if (!ParseUnsigned(*value, /*allow_suffix=*/false, &parsed)) {
    return Expected(key, min > 0 ? "a positive integer" : "a non-negative integer", *value);
  }
  if (parsed < min) return Fail(key, fmt::format("must be at least {}, got {}", min, parsed));
  if (parsed > max) return Fail(key, fmt::format("must be at most {}, got {}", max, parsed));
  *out = parsed;
}

void OptionReader::Integer(std::string_view key, uint32_t* out, uint32_t min, uint32_t max) {
  uint64_t wide = *out;
  Integer(key, &wide, min, max);
  *out = static_cast<uint32_t>(wide);
}

void OptionReader::StringList(std::string_view key, std::vector<std::string>* out) {
  const json* value = Take(key);
  if (value == nullptr) return;
  if (value->is_string()) {
    *out = {value->get<std::string>()};
    return;
  }
  if (!value->is_array() || value->empty()) {
    return Expected(key, "a string or a non-empty list of strings", *value);
  }
  std::vector<std::string> items;
  for (size_t i = 0; i < value->size(); ++i) {
    const json& item = (*value)[i];
    if (!item.is_string()) return Expected(fmt::format("{}[{}]", key, i), "a string", item);
    items.push_back(item.get<std::string>());
  }
  *out = std::move(items);
}

OptionReader& OptionReader::Child(std::string_view key) {
  const json* value = Take(key);
  children_.push_back(
      OptionReader(value == nullptr ? EmptyObject() : *value, syntax_, PathOf(key), error_));
  return children_.back();
}

absl::Status OptionReader::Finish() {
  for (OptionReader& child : children_) {
    absl::Status status = child.Finish();
    if (!status.ok()) return status;
  }
  if (!ok()) return *error_;
  for (const auto& [key, value] : object_->items()) {
    if (known_.contains(key)) continue;
    std::string expected;
    for (const std::string& name : known_) {
      if (!expected.empty()) expected += ", ";
      expected += name;
    }
    Fail(key, fmt::format("unknown option{}",
                          expected.empty() ? "" : fmt::format(" (known here: {})", expected)));
    return *error_;
  }
  return absl::OkStatus();
}

}  // namespace bexd::cli
