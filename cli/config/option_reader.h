// SPDX-License-Identifier: GPL-2.0-or-later
// Typed access to one options object (from keyval, a JSON argument, the config file or QMP), with
// the error naming the key by its full path. The first error sticks: later reads become no-ops,
// so a schema reads its fields in a row and checks the status once at the end.
#pragma once

#include <absl/status/status.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bexd::cli {

// How the scalars of an options object are spelled.
enum class Syntax {
  kKeyval,  // every scalar is a string: "on", "64M", "4"
  kJson,    // scalars have their JSON type: true, 67108864, 4
};

class OptionReader {
 public:
  // `object` must outlive the reader. `path` names it in errors ("export[0]", "" at the top).
  OptionReader(const nlohmann::json& object, Syntax syntax, std::string path = "");

  bool Has(std::string_view key) const;
  // The raw string at `key` if it is a string, without marking the key as read.
  std::optional<std::string> Peek(std::string_view key) const;

  void String(std::string_view key, std::string* out);
  void RequiredString(std::string_view key, std::string* out);
  // on/off, yes/no, true/false in keyval; a JSON boolean otherwise.
  void Bool(std::string_view key, bool* out);
  // A byte count; keyval also takes a k/M/G/T/P/E suffix (powers of 1024) as QEMU does.
  void Size(std::string_view key, uint64_t* out);
  // A plain integer within [min, max].
  void Integer(std::string_view key, uint64_t* out, uint64_t min = 0,
               uint64_t max = std::numeric_limits<uint64_t>::max());
  void Integer(std::string_view key, uint32_t* out, uint32_t min, uint32_t max);
  // A string, or a list of strings (keyval: key.0=a,key.1=b).
  void StringList(std::string_view key, std::vector<std::string>* out);

  template <typename T>
  void Enum(std::string_view key, T* out,
            std::initializer_list<std::pair<std::string_view, T>> names) {
    std::string value;
    String(key, &value);
    if (!ok() || !Has(key)) return;
    for (const auto& [name, member] : names) {
      if (value == name) {
        *out = member;
        return;
      }
    }
    std::string expected;
    for (const auto& [name, member] : names) {
      if (!expected.empty()) expected += ", ";
      expected += name;
    }
    Fail(key, "expected one of " + expected + "; got " + Quote(value));
  }

  // The nested object at `key` (an empty one if absent). It belongs to this reader: its unknown
  // keys and errors are reported by this reader's Finish().
  OptionReader& Child(std::string_view key);

  // The value at `key` as given (nullptr if absent), marking the key as read: for a value whose
  // shape decides how it is read, or that a nested schema parses.
  const nlohmann::json* Value(std::string_view key) { return Take(key); }

  // Records an error for `key` unless one was recorded already.
  void Fail(std::string_view key, std::string_view message);
  // Records an error a nested schema reported (its message names the full path already).
  void Fail(const absl::Status& status);
  bool ok() const { return error_->ok(); }
  // Reports the first error, or else the first key that nothing read.
  absl::Status Finish();

  // The full path of `key` in this object, as errors name it.
  std::string PathOf(std::string_view key) const;
  static std::string Quote(std::string_view text);

 private:
  OptionReader(const nlohmann::json& object, Syntax syntax, std::string path,
               std::shared_ptr<absl::Status> error);
  // The value at `key`, marking the key as known; null if absent or an error is pending.
  const nlohmann::json* Take(std::string_view key);
  void Expected(std::string_view key, std::string_view what, const nlohmann::json& got);
  bool ParseUnsigned(const nlohmann::json& value, bool allow_suffix, uint64_t* out) const;

  const nlohmann::json* object_;
  Syntax syntax_;
  std::string path_;
  std::shared_ptr<absl::Status> error_;
  std::set<std::string, std::less<>> known_;
  std::deque<OptionReader> children_;
};

}  // namespace bexd::cli
