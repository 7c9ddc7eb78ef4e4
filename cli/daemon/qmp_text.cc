// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/qmp_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "cli/config/json_text.h"

namespace bexd::cli {
namespace {

using nlohmann::json;

constexpr int kIndent = 4;
constexpr uint32_t kQdictBuckets = 512;
constexpr char32_t kReplacement = 0xFFFD;

// The bucket QEMU's QDict files `key` under (its tdb_hash modulo the bucket count). A QDict is
// walked bucket by bucket, which is the member order of everything QEMU sends.
uint32_t QdictBucket(std::string_view key) {
  uint32_t value = 0x238F13AFu * static_cast<uint32_t>(key.size());
  for (size_t i = 0; i < key.size(); ++i) {
    value += static_cast<uint32_t>(static_cast<unsigned char>(key[i])) << (i * 5 % 24);
  }
  return (1103515243u * value + 12345u) % kQdictBuckets;
}

// Decodes one UTF-8 sequence at `*pos` and moves past it; a malformed one is one byte of
// kReplacement.
char32_t NextCodePoint(std::string_view text, size_t* pos) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte(*pos);
  int length = lead < 0x80         ? 1
               : (lead >> 5) == 6  ? 2
               : (lead >> 4) == 14 ? 3
               : (lead >> 3) == 30 ? 4
                                   : 0;
  if (length == 0 || *pos + length > text.size()) {
    ++*pos;
    return kReplacement;
  }
  char32_t code = length == 1 ? lead : lead & (0x7F >> length);
  for (int i = 1; i < length; ++i) {
    if ((byte(*pos + i) & 0xC0) != 0x80) {
      ++*pos;
      return kReplacement;
    }
    code = (code << 6) | (byte(*pos + i) & 0x3F);
  }
  static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  *pos += length;
  bool overlong = code < kSmallest[length];
  bool surrogate = code >= 0xD800 && code <= 0xDFFF;
  return overlong || surrogate || code > 0x10FFFF ? kReplacement : code;
}

void AppendString(std::string_view text, std::string* out) {
  out->push_back('"');
  for (size_t pos = 0; pos < text.size();) {
    char32_t code = NextCodePoint(text, &pos);
    switch (code) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (code > 0xFFFF) {
          char32_t offset = code - 0x10000;
          *out +=
              fmt::format("\\u{:04X}\\u{:04X}", 0xD800 + (offset >> 10), 0xDC00 + (offset & 0x3FF));
        } else if (code < 0x20 || code >= 0x7F) {
          *out += fmt::format("\\u{:04X}", static_cast<uint32_t>(code));
        } else {
          out->push_back(static_cast<char>(code));
        }
    }
  }
  out->push_back('"');
}

class Writer {
 public:
  explicit Writer(bool pretty) : pretty_(pretty) {}

  void Value(const json& value, int depth) {
    if (!fits()) return;
    switch (value.type()) {
      case json::value_t::object:
        Object(value, depth);
        break;
      case json::value_t::array:
        Array(value, depth);
        break;
      case json::value_t::string:
        AppendString(value.get_ref<const std::string&>(), &out_);
        break;
      case json::value_t::boolean:
        out_ += value.get<bool>() ? "true" : "false";
        break;
      case json::value_t::number_integer:
        out_ += fmt::format("{}", value.get<int64_t>());
        break;
      case json::value_t::number_unsigned:
        out_ += fmt::format("{}", value.get<uint64_t>());
        break;
      case json::value_t::number_float:
        out_ += fmt::format("{:.17g}", value.get<double>());
        break;
      default:
        out_ += "null";
        break;
    }
  }

  // False if the pretty form's indentation passed kMaxIndentationBytes: deep nesting with many
  // elements multiplies it, so the caller writes the compact form instead.
  bool fits() const { return indentation_ <= kMaxIndentationBytes; }
  std::string Take() { return std::move(out_); }

 private:
  void Object(const json& object, int depth) {
    std::vector<std::pair<uint32_t, const std::string*>> keys;
    for (const auto& [key, member] : object.items()) keys.emplace_back(QdictBucket(key), &key);
    // Keys sharing a bucket stay in name order: QEMU's order there depends on insertion order,
    // which a parsed or built json object does not keep.
    std::stable_sort(keys.begin(), keys.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    out_.push_back('{');
    for (size_t i = 0; i < keys.size(); ++i) {
      Separator(i, depth + 1);
      AppendString(*keys[i].second, &out_);
      out_ += ": ";
      Value(object.at(*keys[i].second), depth + 1);
    }
    Close('}', depth);
  }

  void Array(const json& array, int depth) {
    out_.push_back('[');
    for (size_t i = 0; i < array.size(); ++i) {
      Separator(i, depth + 1);
      Value(array[i], depth + 1);
    }
    Close(']', depth);
  }

  void Separator(size_t index, int depth) {
    if (index > 0) out_.push_back(',');
    if (pretty_) {
      NewLine(depth);
    } else if (index > 0) {
      out_.push_back(' ');
    }
  }

  void Close(char bracket, int depth) {
    if (pretty_) NewLine(depth);
    out_.push_back(bracket);
  }

  void NewLine(int depth) {
    out_ += "\r\n";
    out_.append(static_cast<size_t>(depth) * kIndent, ' ');
    indentation_ += static_cast<size_t>(depth) * kIndent;
  }

  bool pretty_;
  std::string out_;
  size_t indentation_ = 0;
};

}  // namespace

std::string QmpText(const json& message, bool pretty) {
  Writer writer(pretty);
  writer.Value(message, 0);
  if (writer.fits()) return writer.Take();
  Writer compact(false);
  compact.Value(message, 0);
  return compact.Take();
}

}  // namespace bexd::cli
