#include "cli/json_stream.h"

namespace bexd::cli {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

std::optional<std::string> JsonStream::Next() {
  if (overflowed_) return std::nullopt;
  if (scanned_ == 0) {
    while (begin_ < buffer_.size() && IsSpace(buffer_[begin_])) ++begin_;
    // Drop consumed bytes now and then, not per document, so pipelined requests stay linear.
    if (begin_ == buffer_.size() || begin_ > buffer_.size() / 2) {
      buffer_.erase(0, begin_);
      begin_ = 0;
    }
    if (buffer_.empty()) return std::nullopt;
  }
  bool container = buffer_[begin_] == '{' || buffer_[begin_] == '[';
  for (size_t i = begin_ + scanned_; i < buffer_.size(); ++i) {
    char c = buffer_[i];
    bool complete = false;
    if (!container) {
      complete = c == '\n';
    } else if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      complete = --depth_ == 0;
    }
    if (complete) {
      std::string document = buffer_.substr(begin_, i + 1 - begin_);
      begin_ = i + 1;
      scanned_ = 0;
      depth_ = 0;
      return document;
    }
  }
  scanned_ = buffer_.size() - begin_;
  if (scanned_ > max_bytes_) overflowed_ = true;
  return std::nullopt;
}

}  // namespace bexd::cli
