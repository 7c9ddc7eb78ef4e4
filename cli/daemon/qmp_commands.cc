// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/qmp_commands.h"

#include <sys/time.h>
#include <unistd.h>

#include <absl/status/statusor.h>
#include <fmt/format.h>

#include <functional>
#include <limits>
#include <string>

#include "cli/config/blockdev_schema.h"
#include "cli/config/control_schema.h"
#include "cli/config/daemon_config.h"
#include "cli/config/export_schema.h"
#include "cli/config/json_text.h"
#include "cli/config/option_reader.h"
#include "cli/daemon/qmp_schema.h"

namespace bexd::cli {
namespace {

using nlohmann::json;

using Command = std::function<absl::StatusOr<json>(Daemon&, const json&)>;

struct CommandEntry {
  std::string_view name;
  Command run;
};

// Reads the arguments of a command that takes named scalars; unknown names are errors.
template <typename ReadFn>
absl::Status ReadArguments(const json& arguments, ReadFn read) {
  OptionReader reader(arguments, Syntax::kJson);
  read(reader);
  return reader.Finish();
}

absl::StatusOr<json> BlockdevAdd(Daemon& daemon, const json& arguments) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(arguments, Syntax::kJson);
  if (!options.ok()) return options.status();
  absl::Status status = daemon.AddBlockdev(*options);
  if (!status.ok()) return status;
  return json::object();
}

absl::StatusOr<json> BlockdevDel(Daemon& daemon, const json& arguments) {
  std::string node_name;
  absl::Status status = ReadArguments(
      arguments, [&](OptionReader& reader) { reader.RequiredString("node-name", &node_name); });
  if (status.ok()) status = daemon.DeleteBlockdev(node_name);
  if (!status.ok()) return status;
  return json::object();
}

absl::StatusOr<json> QueryNamedBlockNodes(Daemon& daemon, const json& arguments) {
  bool flat = false;  // QEMU's: leave out the nested backing-image
  absl::Status status =
      ReadArguments(arguments, [&](OptionReader& reader) { reader.Bool("flat", &flat); });
  if (!status.ok()) return status;
  return daemon.NamedBlockNodes(flat);
}

absl::StatusOr<json> BlockExportAdd(Daemon& daemon, const json& arguments) {
  absl::StatusOr<ExportSpec> spec = ParseExportOptions(arguments, Syntax::kJson);
  if (!spec.ok()) return spec.status();
  absl::Status status = daemon.AddExport(*spec);
  if (!status.ok()) return status;
  return json::object();
}

absl::StatusOr<json> BlockExportDel(Daemon& daemon, const json& arguments) {
  std::string id;
  ExportDeleteMode mode = ExportDeleteMode::kSafe;
  absl::Status status = ReadArguments(arguments, [&](OptionReader& reader) {
    reader.RequiredString("id", &id);
    reader.Enum("mode", &mode,
                {{"safe", ExportDeleteMode::kSafe}, {"hard", ExportDeleteMode::kHard}});
  });
  if (status.ok()) status = daemon.DeleteExport(id, mode);
  if (!status.ok()) return status;
  return json::object();
}

absl::StatusOr<json> QueryBlockExports(Daemon& daemon, const json& arguments) {
  absl::Status status = ReadArguments(arguments, [](OptionReader&) {});
  if (!status.ok()) return status;
  return daemon.BlockExports();
}

absl::StatusOr<json> QueryExportStats(Daemon& daemon, const json& arguments) {
  std::string id;
  absl::Status status =
      ReadArguments(arguments, [&](OptionReader& reader) { reader.String("id", &id); });
  if (!status.ok()) return status;
  return daemon.ExportStats(arguments.contains("id") ? std::optional(id) : std::nullopt);
}

absl::StatusOr<json> ObjectAdd(Daemon& daemon, const json& arguments) {
  absl::StatusOr<ObjectSpec> object = ParseObject(arguments, Syntax::kJson);
  if (!object.ok()) return object.status();
  // A secret or credentials: a node opened later may name them; open nodes read theirs already.
  absl::Status status = std::visit(
      [&daemon](auto&& typed) {
        using Type = std::decay_t<decltype(typed)>;
        if constexpr (std::is_same_v<Type, IothreadObject>) {
          return daemon.AddIothread(std::move(typed));
        } else if constexpr (std::is_same_v<Type, SecretObject>) {
          return daemon.AddSecret(typed.id, std::move(typed.value));
        } else {
          return daemon.AddTlsCredentials(typed.id, std::move(typed.credentials));
        }
      },
      *std::move(object));
  if (!status.ok()) return status;
  return json::object();
}

absl::StatusOr<json> ObjectDel(Daemon& daemon, const json& arguments) {
  std::string id;
  absl::Status status =
      ReadArguments(arguments, [&](OptionReader& reader) { reader.RequiredString("id", &id); });
  if (status.ok()) status = daemon.DeleteObject(id);
  if (!status.ok()) return status;
  return json::object();
}

absl::StatusOr<json> QueryIothreads(Daemon& daemon, const json& arguments) {
  absl::Status status = ReadArguments(arguments, [](OptionReader&) {});
  if (!status.ok()) return status;
  json iothreads = json::array();
  for (const IothreadObject& iothread : daemon.iothreads()) {
    // An iothread object is only a name here: the threads belong to the exports that name it
    // (one per queue), so thread-id is the daemon's main thread. The properties as given.
    iothreads.push_back({{"id", iothread.id},
                         {"thread-id", ::getpid()},
                         {"poll-max-ns", iothread.poll_max_ns},
                         {"poll-grow", iothread.poll_grow},
                         {"poll-shrink", iothread.poll_shrink},
                         {"aio-max-batch", iothread.aio_max_batch}});
  }
  return iothreads;
}

// block_resize and block-resize: QEMU's device or node-name, and size.
absl::StatusOr<json> BlockResize(Daemon& daemon, const json& arguments) {
  std::string device;
  std::string node_name;
  uint64_t size = 0;
  absl::Status status = ReadArguments(arguments, [&](OptionReader& reader) {
    reader.String("device", &device);
    reader.String("node-name", &node_name);
    if (reader.ok() && !reader.Has("size")) reader.Fail("size", "missing");
    reader.Integer("size", &size, 0, std::numeric_limits<int64_t>::max());
  });
  if (!status.ok()) return status;
  // bexd has no block backends: a device name is a node name, as QSD's devices are nodes.
  std::string name = node_name.empty() ? device : node_name;
  status = daemon.ResizeNode(name, static_cast<int64_t>(size));
  if (!status.ok()) return status;
  return json::object();
}

absl::StatusOr<json> QueryVersion(Daemon&, const json& arguments) {
  absl::Status status = ReadArguments(arguments, [](OptionReader&) {});
  if (!status.ok()) return status;
  return QmpGreeting()["QMP"]["version"];
}

// Lists bexd can only answer empty, for the scripts that poll them as they would QSD: it has no
// named block backends (query-block; exports' are anonymous, so QSD's list is empty as well) and
// runs no jobs (query-jobs, query-block-jobs).
absl::StatusOr<json> EmptyList(Daemon&, const json& arguments) {
  absl::Status status = ReadArguments(arguments, [](OptionReader&) {});
  if (!status.ok()) return status;
  return json::array();
}

const std::vector<CommandEntry>& Commands() {
  static const auto* commands = new std::vector<CommandEntry>{
      {"blockdev-add", BlockdevAdd},
      {"blockdev-del", BlockdevDel},
      {"query-named-block-nodes", QueryNamedBlockNodes},
      {"block-export-add", BlockExportAdd},
      {"block-export-del", BlockExportDel},
      {"query-block-exports", QueryBlockExports},
      {"x-query-export-stats", QueryExportStats},
      {"query-version", QueryVersion},
      {"object-add", ObjectAdd},
      {"object-del", ObjectDel},
      {"query-iothreads", QueryIothreads},
      {"query-block", EmptyList},
      {"query-jobs", EmptyList},
      {"query-block-jobs", EmptyList},
      {"block_resize", BlockResize},
      {"block-resize", BlockResize},
      {"query-qmp-schema",
       [](Daemon&, const json& arguments) -> absl::StatusOr<json> {
         absl::Status status = ReadArguments(arguments, [](OptionReader&) {});
         if (!status.ok()) return status;
         return QmpSchema();
       }},
  };
  return *commands;
}

}  // namespace

json QmpGreeting() {
  return {
      {"QMP",
       {{"version",
         {{"qemu", {{"major", kQemuLevel[0]}, {"minor", kQemuLevel[1]}, {"micro", kQemuLevel[2]}}},
          {"package", fmt::format("bexd {}", BEXD_VERSION)}}},
        {"capabilities", json::array()}}}};
}

json QmpEvent(std::string_view name, json data) {
  timeval now;
  ::gettimeofday(&now, nullptr);
  return {{"event", name},
          {"data", std::move(data)},
          {"timestamp", {{"seconds", now.tv_sec}, {"microseconds", now.tv_usec}}}};
}

json QmpError(std::string_view error_class, std::string_view desc) {
  return {{"error", {{"class", error_class}, {"desc", desc}}}};
}

json QmpCommands::Handle(const json& request, bool* negotiated) {
  if (!request.is_object()) return QmpError("GenericError", "QMP input must be a JSON object");
  json reply;
  auto execute = request.find("execute");
  auto arguments = request.find("arguments");
  std::string unexpected;
  for (const auto& [key, value] : request.items()) {
    if (key != "execute" && key != "arguments" && key != "id" && unexpected.empty()) {
      unexpected = key;
    }
  }
  if (execute == request.end()) {
    reply = QmpError("GenericError", "QMP input lacks member 'execute'");
  } else if (!execute->is_string()) {
    reply = QmpError("GenericError", "QMP input member 'execute' must be a string");
  } else if (arguments != request.end() && !arguments->is_object()) {
    reply = QmpError("GenericError", "QMP input member 'arguments' must be an object");
  } else if (!unexpected.empty()) {
    reply =
        QmpError("GenericError", fmt::format("QMP input member '{}' is unexpected", unexpected));
  } else {
    reply = Execute(execute->get_ref<const std::string&>(),
                    arguments == request.end() ? json::object() : *arguments, negotiated);
  }
  if (auto id = request.find("id"); id != request.end()) reply["id"] = *id;
  return reply;
}

json QmpCommands::Execute(std::string_view command, const json& arguments, bool* negotiated) {
  if (command == "qmp_capabilities") {
    if (*negotiated) {
      return QmpError("CommandNotFound",
                      "Capabilities negotiation is already complete, command ignored");
    }
    // `enable` is a list, empty included (a client may pass on the greeting's empty
    // capabilities as they are), with QEMU's type errors.
    json rest = arguments;
    json enable = json::array();
    if (rest.is_object() && rest.contains("enable")) {
      enable = rest["enable"];
      rest.erase("enable");
    }
    absl::Status status = ReadArguments(rest, [](OptionReader&) {});
    if (!status.ok()) return QmpError("GenericError", std::string(status.message()));
    if (!enable.is_array()) {
      return QmpError("GenericError", "Invalid parameter type for 'enable', expected: array");
    }
    for (size_t i = 0; i < enable.size(); ++i) {
      if (!enable[i].is_string()) {
        return QmpError(
            "GenericError",
            fmt::format("Invalid parameter type for 'enable[{}]', expected: string", i));
      }
    }
    if (!enable.empty()) {
      return QmpError("GenericError", fmt::format("capability '{}' is not available",
                                                  enable.front().get<std::string>()));
    }
    *negotiated = true;
    return {{"return", json::object()}};
  }
  if (!*negotiated) {
    return QmpError("CommandNotFound",
                    "Expecting capabilities negotiation with 'qmp_capabilities'");
  }
  if (command == "quit") {
    absl::Status status = ReadArguments(arguments, [](OptionReader&) {});
    if (!status.ok()) return QmpError("GenericError", std::string(status.message()));
    quit_requested_ = true;
    if (on_quit_) on_quit_();
    return {{"return", json::object()}};
  }
  if (command == "query-commands") {
    json names = json::array();
    for (std::string_view name : {"qmp_capabilities", "query-commands", "quit"}) {
      names.push_back({{"name", name}});
    }
    for (const CommandEntry& entry : Commands()) names.push_back({{"name", entry.name}});
    return {{"return", std::move(names)}};
  }
  for (const CommandEntry& entry : Commands()) {
    if (entry.name != command) continue;
    absl::StatusOr<json> result = entry.run(*daemon_, arguments);
    if (!result.ok()) return QmpError("GenericError", std::string(result.status().message()));
    return {{"return", *std::move(result)}};
  }
  // QEMU's words, the name unquoted (human-monitor-command, which QSD lacks too, gets this).
  return QmpError("CommandNotFound", fmt::format("The command {} has not been found", command));
}

}  // namespace bexd::cli
