// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/command_line.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "cli/config/item_help.h"
#include "cli/config/json_text.h"
#include "cli/config/keyval.h"
#include "cli/config/paths.h"
#include "cli/config/short_booleans.h"
#include "util/read_file.h"

namespace bexd::cli {
namespace {

using nlohmann::json;

using Adder = absl::Status (DaemonConfig::*)(const json&, Syntax, const std::string&);

// An option whose value is keyval or JSON and adds one item to the config.
struct ItemOption {
  std::string_view name;
  std::string_view implied_key;  // QEMU's: "--object iothread,id=t0" is qom-type=iothread
  Adder add;
  int count = 0;
};

absl::Status AddItem(CommandLine* command_line, ItemOption* option, std::string_view value) {
  ++option->count;
  std::string where = fmt::format("--{}{}", option->name,
                                  option->count > 1 ? fmt::format(" #{}", option->count) : "");
  bool is_json = value.starts_with("{");
  std::string expanded;
  if (!is_json && option->name == "chardev") {
    std::vector<std::string> warnings;
    expanded = ExpandShortBooleans(value, &warnings);
    for (const std::string& warning : warnings) log::Warn("{}", warning);
    value = expanded;
  }
  absl::StatusOr<json> object =
      is_json ? ParseJsonText(value) : ParseKeyval(value, option->implied_key);
  absl::Status status = object.ok() ? (command_line->config.*(option->add))(
                                          *object, is_json ? Syntax::kJson : Syntax::kKeyval, "")
                                    : object.status();
  if (status.ok()) return status;
  return absl::InvalidArgumentError(fmt::format("{}: {}", where, std::string(status.message())));
}

// A configuration of thousands of nodes and exports fits many times over.
constexpr uint64_t kMaxConfigBytes = 16 << 20;

absl::Status AddConfigFile(CommandLine* command_line, const std::string& path) {
  absl::StatusOr<std::string> text = util::ReadBoundedFile(path, kMaxConfigBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--config: {}", std::string(text.status().message())));
  }
  // The JSON parser would take a NUL for the end of the text and ignore the rest.
  if (const size_t nul = text->find('\0'); nul != std::string::npos) {
    return absl::InvalidArgumentError(
        fmt::format("--config {}: a NUL byte at offset {}; a config file is JSON text", path, nul));
  }
  absl::StatusOr<json> document = ParseJsonText(*text);
  absl::Status status =
      document.ok() ? command_line->config.AddConfigFile(*document) : document.status();
  if (status.ok()) return status;
  return absl::InvalidArgumentError(
      fmt::format("--config {}: {}", path, std::string(status.message())));
}

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string_view>& args) {
  CommandLine command_line;
  command_line.demo = args.empty();
  ItemOption items[] = {
      {"object", "qom-type", &DaemonConfig::AddObject},
      {"blockdev", "driver", &DaemonConfig::AddBlockdev},
      {"export", "type", &DaemonConfig::AddExport},
      {"chardev", "backend", &DaemonConfig::AddChardev},
      {"monitor", "chardev", &DaemonConfig::AddMonitor},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "-h" || arg == "--help") {
      command_line.help = true;
      continue;
    }
    if (arg == "-V" || arg == "--version") {
      command_line.version = true;
      continue;
    }
    if (!arg.starts_with("--")) {
      return absl::InvalidArgumentError(
          fmt::format("unexpected argument '{}' (options start with --; see --help)", arg));
    }
    std::string_view name = arg.substr(2);
    std::optional<std::string_view> inline_value;
    if (size_t equals = name.find('='); equals != std::string_view::npos) {
      inline_value = name.substr(equals + 1);
      name = name.substr(0, equals);
    }
    if (name == "daemonize" || name == "demo") {
      if (inline_value) {
        return absl::InvalidArgumentError(fmt::format("--{} takes no value", name));
      }
      (name == "daemonize" ? command_line.daemonize : command_line.demo) = true;
      continue;
    }
    ItemOption* item = nullptr;
    for (ItemOption& candidate : items) {
      if (name == candidate.name) item = &candidate;
    }
    static constexpr std::string_view kValued[] = {"config", "pidfile", "demo-dir", "log-level"};
    if (item == nullptr &&
        std::find(std::begin(kValued), std::end(kValued), name) == std::end(kValued)) {
      return absl::InvalidArgumentError(fmt::format("unknown option '--{}' (see --help)", name));
    }
    std::string_view value;
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(fmt::format("{} needs a value (see --help)", arg));
    }
    absl::Status status;
    if (item != nullptr) {
      if (std::optional<std::string> help = ItemHelp(item->name, value)) {
        // As QEMU, the first help request ends the parsing: nothing after it is looked at.
        command_line.item_help = *std::move(help);
        return command_line;
      }
      status = AddItem(&command_line, item, value);
    } else if (name == "config") {
      status = AddConfigFile(&command_line, std::string(value));
    } else if (value.empty()) {
      status = absl::InvalidArgumentError(fmt::format("--{}: empty value", name));
    } else if (name == "pidfile") {
      command_line.pidfile = AbsolutePath(std::string(value));
    } else if (name == "demo-dir") {
      command_line.demo = true;
      command_line.demo_dir = AbsolutePath(std::string(value));
    } else if (!log::ParseLevel(value, &command_line.log_level)) {
      status = absl::InvalidArgumentError(
          fmt::format("--log-level: expected one of error, warn, info, debug; got '{}'", value));
    }
    if (!status.ok()) return status;
  }
  absl::Status status = command_line.config.ResolveMonitors();
  if (!status.ok()) return status;
  if (command_line.daemonize &&
      std::any_of(command_line.config.monitors.begin(), command_line.config.monitors.end(),
                  [](const MonitorSpec& monitor) { return monitor.stdio; })) {
    return absl::InvalidArgumentError(
        "--chardev stdio: cannot be used with --daemonize (the daemon's stdio is /dev/null)");
  }
  if (command_line.demo &&
      (!command_line.config.blockdevs.empty() || !command_line.config.exports.empty())) {
    return absl::InvalidArgumentError(
        "--demo sets up its own node and export; it cannot be combined with --blockdev or "
        "--export");
  }
  return command_line;
}

std::string UsageText() {
  return R"(Usage: bexd [options]
Exports block nodes (image files and devices, qcow2 images, Ceph RBD images, NBD exports, null
devices, raw windows of them) as a file over FUSE or to virtio-fs guests through vhost-user-fs.
Options take QEMU's key=value syntax or a JSON object.

  --blockdev driver=file,node-name=NAME,filename=PATH[,aio=native|threads|io_uring]
             [,cache.direct=on|off][,cache.no-flush=on|off][,read-only=on|off]
             [,discard=ignore|unmap][,locking=auto|on|off]
             every driver also takes discard= and detect-zeroes=off|on|unmap (unmap needs
             discard=unmap)
  --blockdev driver=null-co,node-name=NAME[,size=SIZE][,read-zeroes=on|off][,latency-ns=NS]
  --blockdev driver=host_device,...   as file, for a block or character device
  --blockdev driver=raw,node-name=NAME,file=NODE[,offset=BYTES][,size=BYTES][,discard=...]
             a child is a node name or defined inline: file.driver=file,file.filename=PATH
  --blockdev driver=qcow2,node-name=NAME,file=NODE[,backing=NODE|null][,lazy-refcounts=on|off]
             [,cache-size=BYTES][,l2-cache-size=BYTES][,refcount-cache-size=BYTES]
             [,cache-clean-interval=SECONDS][,pass-discard-request=on|off]
             [,pass-discard-other=on|off][,discard=...]   (docs/qcow2.md)
  --blockdev driver=nbd,node-name=NAME,server.type=unix,server.path=SOCKET[,export=NAME]
  --blockdev driver=nbd,node-name=NAME,server.type=inet,server.host=HOST,server.port=PORT
             [,export=NAME][,reconnect-delay=SECONDS][,open-timeout=SECONDS][,tls-creds=ID]
             [,discard=...]
  --blockdev driver=rbd,node-name=NAME,pool=POOL,image=IMAGE[,namespace=NS][,snapshot=SNAP]
             [,conf=CEPH.CONF][,user=ID][,key-secret=SECRET][,auth-client-required.0=cephx]
             [,server.0.host=HOST,server.0.port=PORT][,cache.direct=on|off][,discard=...]
  --export type=fuse,id=ID,node-name=NAME,mountpoint=FILE[,writable=on|off]
           [,growable=on|off][,allow-other=on|off|auto][,writethrough=on|off][,num-queues=N]
           [,passthrough=on|off|auto]   kernel reads/writes the image itself where it can
           [,queue-cpus=CPUS]   pin queue i to the i-th CPU of a list such as 0-3,,8
           [,io-uring=auto|on|off][,io-uring-queue-depth=N]
                                FUSE over io_uring when the kernel offers it (auto), always
                                (on: refuse to start without it) or never (off, the default);
                                N ring entries per CPU queue (default 32)
  --export type=vhost-user-fs,id=ID,node-name=NAME,addr.type=unix,addr.path=SOCKET,tag=TAG
           [,file-name=NAME][,writable=on|off][,growable=on|off][,num-request-queues=N]
           [,queue-cpus=CPUS][,poll-max-ns=NS]
                                NS: longest spin of a request queue before it sleeps
                                (adaptive, default 32768; 0: never spin)
  --object iothread,id=ID       accepted for QSD command lines; exports may name it (iothread=)
  --object secret,id=ID,file=PATH[,format=raw|base64]
                                a secret other options name (rbd's key-secret); data=TEXT
                                works too, but shows the secret to every local user
  --object tls-creds-x509,id=ID,dir=DIR[,verify-peer=on|off]
  --object tls-creds-psk,id=ID,dir=DIR[,username=NAME]
                                TLS credentials for nbd's tls-creds (QEMU's files in DIR)
  --chardev socket,id=ID,path=SOCKET,server=on,wait=off
  --chardev socket,id=ID,fd=N,server=on   a listening unix socket passed as descriptor N
  --chardev stdio,id=ID                    QMP over stdin and stdout
  --monitor [chardev=]ID[,id=NAME][,mode=control][,pretty=on] | --monitor path=SOCKET[,pretty=on]
                                QMP monitor (see docs/control.md)
  --config FILE                 JSON: {"blockdev":[...],"export":[...],"object":[...],
                                "monitor":{"path":...}}; adds to the command line
  --pidfile FILE                write the pid once exports are up; refuse if a running bexd
                                holds it
  --daemonize                   detach once start-up succeeded (the parent reports errors)
  --log-level error|warn|info|debug
  --demo, --demo-dir DIR        export a 64 MiB demo image (the default with no options)
  --object help, --object TYPE,help, --blockdev help, --export help
                                list the object types, a type's options, the block drivers,
                                the export types
  -h, --help                    this text
  -V, --version                 print the version
Full reference: docs/usage.md
)";
}

}  // namespace bexd::cli
