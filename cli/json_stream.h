// Splits the byte stream of a QMP connection into JSON documents. A document is a balanced {...}
// or [...] (strings and escapes respected, so braces inside strings do not count), or, for
// anything else, the rest of the line, which the caller then reports as an error.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace bexd::cli {

class JsonStream {
 public:
  explicit JsonStream(size_t max_document_bytes) : max_bytes_(max_document_bytes) {}

  void Append(std::string_view bytes) { buffer_.append(bytes); }
  // The next complete document, if any.
  std::optional<std::string> Next();
  // True once an unfinished document has grown beyond the limit; the connection should be
  // dropped, since there is no safe place to resume.
  bool overflowed() const { return overflowed_; }

 private:
  size_t max_bytes_;
  std::string buffer_;
  size_t begin_ = 0;    // where the current document starts in buffer_
  size_t scanned_ = 0;  // bytes of the current document already scanned
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  bool overflowed_ = false;
};

}  // namespace bexd::cli
