// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/names.h"

#include <absl/strings/ascii.h>
#include <fmt/format.h>

namespace bexd::cli {

absl::Status CheckName(std::string_view name) {
  constexpr size_t kMaxLength = 127;
  if (name.size() > kMaxLength) {
    return absl::InvalidArgumentError(fmt::format("longer than {} bytes", kMaxLength));
  }
  if (name.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(name[0]))) {
    return absl::InvalidArgumentError(
        fmt::format("'{}' must start with a letter (then letters, digits, -, . or _)", name));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
      return absl::InvalidArgumentError(
          fmt::format("'{}' may contain only letters, digits, -, . and _", name));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNodeName(std::string_view name) {
  constexpr size_t kMaxNodeNameLength = 31;
  if (name.size() > kMaxNodeNameLength) {
    return absl::InvalidArgumentError(
        fmt::format("Node name too long (at most {} bytes)", kMaxNodeNameLength));
  }
  return CheckName(name);
}

void ReadId(OptionReader& reader, std::string* id) {
  reader.RequiredString("id", id);
  if (!reader.ok()) return;
  absl::Status status = CheckName(*id);
  if (!status.ok()) reader.Fail("id", std::string(status.message()));
}

}  // namespace bexd::cli
