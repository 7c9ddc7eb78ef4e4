// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/json_stream.h"

#include <fmt/format.h>

#include <utility>

#include "cli/config/json_text.h"

namespace bexd::cli {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

bool IsStructural(char c) {
  return c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':' || c == '"' ||
         c == '\'';
}

}  // namespace

std::optional<absl::StatusOr<std::string>> JsonStream::Next() {
  while (scanned_ < input_.size()) {
    std::optional<absl::StatusOr<std::string>> result = Scan(input_[scanned_++]);
    if (result) return result;
  }
  input_.clear();
  scanned_ = 0;
  return std::nullopt;
}

void JsonStream::Keep(std::string_view text) {
  if (!skipping_) message_.append(text);
}

std::optional<absl::StatusOr<std::string>> JsonStream::Scan(char c) {
  bool complete = false;
  if (state_ == State::kBetween) {
    if (IsSpace(c)) return std::nullopt;
    // A string is a value of its own too; a stray closing bracket, comma or colon is one token.
    state_ = IsStructural(c) ? State::kValue : State::kWord;
    complete = c == '}' || c == ']' || c == ',' || c == ':';
  }
  if (state_ == State::kWord && (IsSpace(c) || IsStructural(c))) {
    // The word ends before `c`, which starts what comes next.
    --scanned_;
    state_ = State::kBetween;
    message_bytes_ = 0;
    std::optional<absl::StatusOr<std::string>> result;
    if (!std::exchange(skipping_, false)) result = std::exchange(message_, {});
    return result;
  }
  ++message_bytes_;
  switch (state_) {
    case State::kBetween:
      break;
    case State::kWord:
      Keep(std::string_view(&c, 1));
      break;
    case State::kValue:
      if (c == '"' || c == '\'') {
        state_ = State::kString;
        quote_ = c;
        Keep("\"");
        break;
      }
      if (c == '{' || c == '[') ++depth_;
      if ((c == '}' || c == ']') && depth_ > 0) complete = --depth_ == 0;
      Keep(std::string_view(&c, 1));
      break;
    case State::kString:
      if (c == '\\') {
        state_ = State::kStringEscape;  // kept with the byte that follows
      } else if (c == quote_) {
        state_ = State::kValue;
        Keep("\"");
        complete = depth_ == 0;
      } else if (c == '"') {
        Keep("\\\"");  // a double quote inside single quotes
      } else {
        Keep(std::string_view(&c, 1));
      }
      break;
    case State::kStringEscape:
      state_ = State::kString;
      // QEMU accepts \' in both kinds of strings; JSON has no such escape.
      if (c == '\'') {
        Keep("'");
      } else {
        Keep("\\");
        Keep(std::string_view(&c, 1));
      }
      break;
  }
  std::optional<absl::StatusOr<std::string>> result;
  if (!skipping_ && (depth_ > kMaxJsonDepth || message_bytes_ > max_bytes_)) {
    result = absl::InvalidArgumentError(
        depth_ > kMaxJsonDepth
            ? JsonDepthError()
            : fmt::format("JSON token size limit exceeded (a request may be at most {} bytes)",
                          max_bytes_));
    skipping_ = true;
    message_ = {};
  }
  if (complete) {
    state_ = State::kBetween;
    depth_ = 0;
    message_bytes_ = 0;
    if (!std::exchange(skipping_, false)) result = std::exchange(message_, {});
  }
  return result;
}

}  // namespace bexd::cli
