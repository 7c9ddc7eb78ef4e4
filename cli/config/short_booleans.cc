// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/short_booleans.h"

#include <fmt/format.h>

namespace bexd::cli {
namespace {

// Splits at the commas that are not part of a ",," escape; the pieces keep their escapes.
std::vector<std::string_view> Elements(std::string_view text) {
  std::vector<std::string_view> elements;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') continue;
    if (i + 1 < text.size() && text[i + 1] == ',') {
      ++i;
      continue;
    }
    elements.push_back(text.substr(start, i - start));
    start = i + 1;
  }
  elements.push_back(text.substr(start));
  return elements;
}

}  // namespace

std::string ExpandShortBooleans(std::string_view keyval, std::vector<std::string>* warnings) {
  std::vector<std::string_view> elements = Elements(keyval);
  std::string out;
  for (size_t i = 0; i < elements.size(); ++i) {
    std::string_view element = elements[i];
    if (i > 0) out += ',';
    // The first element may be the implied backend ("socket"); "help" asks for help.
    if (i == 0 || element.empty() || element == "help" ||
        element.find('=') != std::string_view::npos) {
      out += element;
      continue;
    }
    bool off = element.starts_with("no");
    std::string_view name = off ? element.substr(2) : element;
    std::string_view value = off ? "off" : "on";
    warnings->push_back(
        fmt::format("short-form boolean option '{}' deprecated\nPlease use {}={} instead", element,
                    name, value));
    out += fmt::format("{}={}", name, value);
  }
  return out;
}

}  // namespace bexd::cli
