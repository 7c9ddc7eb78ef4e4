// SPDX-License-Identifier: GPL-2.0-or-later
// Splits the byte stream of a QMP connection into JSON messages, as QEMU's JSON streamer does. A
// message is a balanced {...} or [...] (strings and escapes respected, so brackets inside strings
// do not count), or a value or token outside them: a string, a word (a number, a literal, or
// garbage) up to the next space or structural character, or a stray `}`, `]`, `,` or `:`. The
// caller reports those as errors, one for each, and the messages after them on the same line
// are still served, as QEMU serves them.
//
// The limits are enforced here, while scanning, before anything is parsed into a tree: a message
// nested deeper than kMaxJsonDepth or longer than the byte limit is refused, and the rest of it
// is skipped without being kept, up to where its brackets balance (or the word ends), so the
// connection stays usable for the next message.
//
// Strings in single quotes, which QEMU's parser accepts and iotests send, are rewritten into
// double-quoted JSON strings on the way, as are the \' escapes QEMU allows in either kind.
#pragma once

#include <absl/status/statusor.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace bexd::cli {

class JsonStream {
 public:
  explicit JsonStream(size_t max_message_bytes) : max_bytes_(max_message_bytes) {}

  void Append(std::string_view bytes) { input_.append(bytes); }
  // The next complete message, or the error that refused it; nullopt until more input comes.
  std::optional<absl::StatusOr<std::string>> Next();
  // What this stream holds in memory: input not scanned yet and the unfinished message.
  size_t buffered_bytes() const { return input_.size() - scanned_ + message_.size(); }

 private:
  enum class State { kBetween, kWord, kValue, kString, kStringEscape };

  // Scans one byte: a complete message, the error that refuses the current one, or nullopt.
  std::optional<absl::StatusOr<std::string>> Scan(char c);
  // Appends to the current message, unless it is being skipped.
  void Keep(std::string_view text);

  size_t max_bytes_;
  std::string input_;
  size_t scanned_ = 0;  // bytes of input_ already scanned
  State state_ = State::kBetween;
  char quote_ = '"';  // the quote that ends the current string
  int depth_ = 0;
  std::string message_;       // the current message, as far as it has been scanned (and rewritten)
  size_t message_bytes_ = 0;  // input bytes of the current message, also while skipping
  bool skipping_ = false;     // the current message was refused; its rest is not kept
};

}  // namespace bexd::cli
