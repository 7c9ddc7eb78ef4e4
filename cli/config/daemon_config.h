// SPDX-License-Identifier: GPL-2.0-or-later
// Everything the command line and the config file ask the daemon to set up at start.
#pragma once

#include <absl/status/status.h>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "block/options.h"
#include "cli/config/control_schema.h"
#include "cli/config/export_schema.h"
#include "cli/config/option_reader.h"
#include "cli/config/secret_object.h"
#include "cli/config/tls_creds_object.h"

namespace bexd::cli {

// One --object or object-add, by its qom-type: secret, a TLS credentials type, else iothread.
using ObjectSpec = std::variant<IothreadObject, SecretObject, TlsCredsObject>;
absl::StatusOr<ObjectSpec> ParseObject(const nlohmann::json& object, Syntax syntax,
                                       const std::string& path = "");
std::string_view IdOf(const ObjectSpec& object);

struct DaemonConfig {
  std::vector<IothreadObject> iothreads;  // --object iothread
  std::vector<SecretObject> secrets;      // --object secret
  std::vector<TlsCredsObject> tls_creds;  // --object tls-creds-x509, tls-creds-psk
  std::vector<block::BlockdevOptions> blockdevs;
  std::vector<ExportSpec> exports;
  std::vector<ChardevSpec> chardevs;
  std::vector<MonitorSpec> monitors;

  // Each adds one item of its kind. Errors name keys below `path` ("export[1].tag"; "tag" for
  // an empty path).
  absl::Status AddObject(const nlohmann::json& object, Syntax syntax, const std::string& path);
  absl::Status AddBlockdev(const nlohmann::json& object, Syntax syntax, const std::string& path);
  absl::Status AddExport(const nlohmann::json& object, Syntax syntax, const std::string& path);
  absl::Status AddChardev(const nlohmann::json& object, Syntax syntax, const std::string& path);
  absl::Status AddMonitor(const nlohmann::json& object, Syntax syntax, const std::string& path);

  // Adds the items of a config file's JSON object: {"object":[...], "blockdev":[...],
  // "export":[...], "monitor":{...} or [...]}. Errors name the JSON path.
  absl::Status AddConfigFile(const nlohmann::json& document);

  // Points every chardev=ID monitor at its chardev's socket; run once all options are in.
  absl::Status ResolveMonitors();
};

}  // namespace bexd::cli
