// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/item_help.h"

#include <fmt/format.h>

#include <span>
#include <vector>

#include "cli/config/blockdev_schema.h"
#include "cli/config/export_schema.h"

namespace bexd::cli {
namespace {

bool IsHelp(std::string_view word) { return word == "help" || word == "?"; }

// The keyval elements of `value`, split at single commas (",," is a comma inside a value).
std::vector<std::string_view> Elements(std::string_view value) {
  std::vector<std::string_view> elements;
  size_t start = 0;
  for (size_t i = 0; i <= value.size(); ++i) {
    if (i < value.size() && value[i] != ',') continue;
    if (i + 1 < value.size() && value[i + 1] == ',') {
      ++i;
      continue;
    }
    elements.push_back(value.substr(start, i - start));
    start = i + 1;
  }
  return elements;
}

// The value of the implied key (`iothread` in "iothread,id=t0" or "qom-type=iothread,id=t0").
std::string_view ImpliedValue(const std::vector<std::string_view>& elements,
                              std::string_view implied_key) {
  if (elements.empty()) return {};
  if (elements[0].find('=') == std::string_view::npos) return elements[0];
  for (std::string_view element : elements) {
    if (element.starts_with(implied_key) && element.size() > implied_key.size() &&
        element[implied_key.size()] == '=') {
      return element.substr(implied_key.size() + 1);
    }
  }
  return {};
}

std::string List(std::string_view title, std::span<const std::string_view> names) {
  std::string text = fmt::format("{}\n", title);
  for (std::string_view name : names) text += fmt::format("  {}\n", name);
  return text;
}

struct Property {
  std::string_view name;
  std::string_view type;
  std::string_view description;  // may be empty
};

// QEMU's object_property_help(): "  name=<type>", padded to 24 columns before " - description".
std::string PropertyList(std::string_view type, std::span<const Property> properties) {
  if (properties.empty()) return fmt::format("There are no options for {}.\n", type);
  std::string text = fmt::format("{} options:\n", type);
  for (const Property& property : properties) {
    std::string line = fmt::format("  {}=<{}>", property.name, property.type);
    if (!property.description.empty()) {
      line = fmt::format("{:<24} - {}", line, property.description);
    }
    text += line + "\n";
  }
  return text;
}

// What `--object TYPE,...` takes besides qom-type and id, sorted by name as QEMU prints them.
// bexd's iothread objects are names for export queues only (usage.md): their properties are
// QEMU's, kept for query-iothreads.
constexpr std::string_view kObjectTypes[] = {"iothread", "secret", "tls-creds-psk",
                                             "tls-creds-x509"};
constexpr Property kIothreadProperties[] = {
    {"aio-max-batch", "int", "kept for query-iothreads; no effect in bexd"},
    {"poll-grow", "int", "kept for query-iothreads; no effect in bexd"},
    {"poll-max-ns", "int", "kept for query-iothreads; the export's own poll-max-ns polls"},
    {"poll-shrink", "int", "kept for query-iothreads; no effect in bexd"},
    {"thread-pool-max", "int", "no effect in bexd"},
    {"thread-pool-min", "int", "no effect in bexd"},
};
constexpr Property kSecretProperties[] = {
    {"data", "string", "the secret itself (visible to every local user; prefer file)"},
    {"file", "string", "a file holding the secret"},
    {"format", "QCryptoSecretFormat", "raw or base64 (default: raw)"},
};

constexpr Property kTlsX509Properties[] = {
    {"dir", "string", "ca-cert.pem, and client-cert.pem with client-key.pem if the server asks"},
    {"endpoint", "QCryptoTLSCredsEndpoint", "client (default) or server"},
    {"sanity-check", "bool", "accepted; bexd checks the files when the object is created"},
    {"verify-peer", "bool", "check the server's certificate (default: on)"},
};
constexpr Property kTlsPskProperties[] = {
    {"dir", "string", "keys.psk: lines of username:hex-key"},
    {"endpoint", "QCryptoTLSCredsEndpoint", "client (default) or server"},
    {"username", "string", "the key's name in keys.psk (default: qemu)"},
};

std::string ObjectHelp(std::string_view type) {
  if (type == "iothread") return PropertyList(type, kIothreadProperties);
  if (type == "secret") return PropertyList(type, kSecretProperties);
  if (type == "tls-creds-x509") return PropertyList(type, kTlsX509Properties);
  if (type == "tls-creds-psk") return PropertyList(type, kTlsPskProperties);
  return List("List of user creatable objects:", kObjectTypes);
}

}  // namespace

std::optional<std::string> ItemHelp(std::string_view option, std::string_view value) {
  if (value.starts_with("{")) return std::nullopt;
  const std::vector<std::string_view> elements = Elements(value);
  if (option == "object") {
    const std::string_view type = ImpliedValue(elements, "qom-type");
    bool asked = IsHelp(type);
    for (size_t i = 1; i < elements.size(); ++i) asked = asked || IsHelp(elements[i]);
    if (!asked) return std::nullopt;
    return ObjectHelp(IsHelp(type) ? std::string_view() : type);
  }
  if (option == "blockdev" && IsHelp(ImpliedValue(elements, "driver"))) {
    return List("Available block drivers:", kBlockDrivers);
  }
  if (option == "export" && IsHelp(ImpliedValue(elements, "type"))) {
    return List("Available export types:", kExportTypes);
  }
  return std::nullopt;
}

}  // namespace bexd::cli
