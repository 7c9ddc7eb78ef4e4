// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/daemon_config.h"

#include <fmt/format.h>

#include <algorithm>

#include "cli/config/blockdev_schema.h"
#include "cli/config/json_text.h"

namespace bexd::cli {
namespace {

using nlohmann::json;

absl::Status DuplicateId(const std::string& path, std::string_view id) {
  return absl::InvalidArgumentError(
      fmt::format("{}id: '{}' is already used by another item of this kind",
                  path.empty() ? "" : fmt::format("{}.", path), id));
}

template <typename Object>
bool HasId(const std::vector<Object>& objects, std::string_view id) {
  return std::any_of(objects.begin(), objects.end(),
                     [&](const Object& object) { return object.id == id; });
}

}  // namespace

absl::StatusOr<ObjectSpec> ParseObject(const json& object, Syntax syntax, const std::string& path) {
  // A qom-type that is no string is left to the iothread parser, which says so.
  const json* type_value =
      object.is_object() && object.contains("qom-type") ? &object["qom-type"] : nullptr;
  const std::string type =
      type_value != nullptr && type_value->is_string() ? type_value->get<std::string>() : "";
  if (type == "secret") return ParseSecretObject(object, syntax, path);
  if (IsTlsCredsType(type)) return ParseTlsCredsObject(object, syntax, path);
  return ParseIothreadObject(object, syntax, path);
}

std::string_view IdOf(const ObjectSpec& object) {
  return std::visit([](const auto& typed) -> std::string_view { return typed.id; }, object);
}

absl::Status DaemonConfig::AddObject(const json& object, Syntax syntax, const std::string& path) {
  absl::StatusOr<ObjectSpec> parsed = ParseObject(object, syntax, path);
  if (!parsed.ok()) return parsed.status();
  // Objects of every type share one namespace of ids, as in QEMU.
  const std::string_view id = IdOf(*parsed);
  if (HasId(iothreads, id) || HasId(secrets, id) || HasId(tls_creds, id)) {
    return DuplicateId(path, id);
  }
  std::visit(
      [this](auto&& typed) {
        using Type = std::decay_t<decltype(typed)>;
        if constexpr (std::is_same_v<Type, IothreadObject>) iothreads.push_back(std::move(typed));
        if constexpr (std::is_same_v<Type, SecretObject>) secrets.push_back(std::move(typed));
        if constexpr (std::is_same_v<Type, TlsCredsObject>) tls_creds.push_back(std::move(typed));
      },
      *std::move(parsed));
  return absl::OkStatus();
}

absl::Status DaemonConfig::AddBlockdev(const json& object, Syntax syntax, const std::string& path) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(object, syntax, path);
  if (!options.ok()) return options.status();
  blockdevs.push_back(*std::move(options));
  return absl::OkStatus();
}

absl::Status DaemonConfig::AddExport(const json& object, Syntax syntax, const std::string& path) {
  absl::StatusOr<ExportSpec> spec = ParseExportOptions(object, syntax, path);
  if (!spec.ok()) return spec.status();
  exports.push_back(*std::move(spec));
  return absl::OkStatus();
}

absl::Status DaemonConfig::AddChardev(const json& object, Syntax syntax, const std::string& path) {
  absl::StatusOr<ChardevSpec> chardev = ParseChardev(object, syntax, path);
  if (!chardev.ok()) return chardev.status();
  for (const ChardevSpec& existing : chardevs) {
    if (existing.id == chardev->id) return DuplicateId(path, chardev->id);
    if (existing.stdio && chardev->stdio) {
      return absl::InvalidArgumentError(fmt::format(
          "{}cannot use stdio by multiple character devices", path.empty() ? "" : path + ": "));
    }
  }
  chardevs.push_back(*std::move(chardev));
  return absl::OkStatus();
}

absl::Status DaemonConfig::AddMonitor(const json& object, Syntax syntax, const std::string& path) {
  absl::StatusOr<MonitorSpec> monitor = ParseMonitor(object, syntax, path);
  if (!monitor.ok()) return monitor.status();
  monitors.push_back(*std::move(monitor));
  return absl::OkStatus();
}

absl::Status DaemonConfig::AddConfigFile(const json& document) {
  if (!document.is_object()) {
    return absl::InvalidArgumentError(
        fmt::format("expected a JSON object at the top, got {}", DumpJson(document)));
  }
  using Adder = absl::Status (DaemonConfig::*)(const json&, Syntax, const std::string&);
  struct Section {
    std::string_view key;
    Adder add;
  };
  static constexpr Section kSections[] = {
      {"object", &DaemonConfig::AddObject},
      {"blockdev", &DaemonConfig::AddBlockdev},
      {"export", &DaemonConfig::AddExport},
      {"monitor", &DaemonConfig::AddMonitor},
  };
  for (const auto& [key, value] : document.items()) {
    const Section* section = nullptr;
    for (const Section& candidate : kSections) {
      if (key == candidate.key) section = &candidate;
    }
    if (section == nullptr) {
      return absl::InvalidArgumentError(
          fmt::format("{}: unknown section (known: object, blockdev, export, monitor)", key));
    }
    if (key == "monitor" && value.is_object()) {
      absl::Status status = AddMonitor(value, Syntax::kJson, key);
      if (!status.ok()) return status;
      continue;
    }
    if (!value.is_array()) {
      return absl::InvalidArgumentError(
          fmt::format("{}: expected a list of objects, got {}", key, DumpJson(value)));
    }
    for (size_t i = 0; i < value.size(); ++i) {
      absl::Status status =
          (this->*section->add)(value[i], Syntax::kJson, fmt::format("{}[{}]", key, i));
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::Status DaemonConfig::ResolveMonitors() {
  std::vector<std::string> used;
  for (MonitorSpec& monitor : monitors) {
    if (monitor.chardev.empty()) continue;
    if (std::find(used.begin(), used.end(), monitor.chardev) != used.end()) {
      return absl::InvalidArgumentError(
          fmt::format("--monitor: chardev: Device '{}' is in use", monitor.chardev));
    }
    used.push_back(monitor.chardev);
    const ChardevSpec* found = nullptr;
    for (const ChardevSpec& chardev : chardevs) {
      if (chardev.id == monitor.chardev) found = &chardev;
    }
    if (found == nullptr) {
      return absl::InvalidArgumentError(
          fmt::format("--monitor: chardev: '{}' does not name a --chardev", monitor.chardev));
    }
    monitor.path = found->path;
    monitor.fd = found->fd;
    monitor.stdio = found->stdio;
  }
  return absl::OkStatus();
}

}  // namespace bexd::cli
