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

}  // namespace

absl::Status DaemonConfig::AddObject(const json& object, Syntax syntax, const std::string& path) {
  // Objects of every type share one namespace of ids, as in QEMU.
  auto taken = [&](const std::string& id) {
    return std::any_of(iothreads.begin(), iothreads.end(),
                       [&](const IothreadObject& iothread) { return iothread.id == id; }) ||
           std::any_of(secrets.begin(), secrets.end(),
                       [&](const SecretObject& secret) { return secret.id == id; }) ||
           std::any_of(tls_creds.begin(), tls_creds.end(),
                       [&](const TlsCredsObject& creds) { return creds.id == id; });
  };
  if (object.is_object() && object.value("qom-type", json()) == "secret") {
    absl::StatusOr<SecretObject> secret = ParseSecretObject(object, syntax, path);
    if (!secret.ok()) return secret.status();
    if (taken(secret->id)) return DuplicateId(path, secret->id);
    secrets.push_back(*std::move(secret));
    return absl::OkStatus();
  }
  if (object.is_object() && IsTlsCredsType(object.value("qom-type", std::string()))) {
    absl::StatusOr<TlsCredsObject> creds = ParseTlsCredsObject(object, syntax, path);
    if (!creds.ok()) return creds.status();
    if (taken(creds->id)) return DuplicateId(path, creds->id);
    tls_creds.push_back(*std::move(creds));
    return absl::OkStatus();
  }
  absl::StatusOr<IothreadObject> iothread = ParseIothreadObject(object, syntax, path);
  if (!iothread.ok()) return iothread.status();
  if (taken(iothread->id)) return DuplicateId(path, iothread->id);
  iothreads.push_back(*std::move(iothread));
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
