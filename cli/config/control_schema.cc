// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/control_schema.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <limits>

#include <fmt/format.h>

#include "cli/config/names.h"
#include "cli/config/paths.h"

namespace bexd::cli {
namespace {

void ReadSocketPath(OptionReader& reader, std::string* path) {
  reader.RequiredString("path", path);
  if (!reader.ok()) return;
  *path = AbsolutePath(*path);
  if (path->size() >= sizeof(sockaddr_un::sun_path)) {
    reader.Fail("path", fmt::format("'{}' is longer than {} bytes, the limit for a unix socket",
                                    *path, sizeof(sockaddr_un::sun_path) - 1));
  }
}

}  // namespace

absl::StatusOr<IothreadObject> ParseIothreadObject(const nlohmann::json& object, Syntax syntax,
                                                   const std::string& path) {
  OptionReader reader(object, syntax, path);
  std::string type;
  reader.RequiredString("qom-type", &type);
  if (reader.ok() && type != "iothread") {
    reader.Fail("qom-type",
                fmt::format("'{}' is not supported (bexd knows iothread, secret)", type));
  }
  IothreadObject iothread;
  ReadId(reader, &iothread.id);
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  reader.Integer("poll-max-ns", &iothread.poll_max_ns, 0, kMax);
  reader.Integer("poll-grow", &iothread.poll_grow, 0, kMax);
  reader.Integer("poll-shrink", &iothread.poll_shrink, 0, kMax);
  reader.Integer("aio-max-batch", &iothread.aio_max_batch, 0, kMax);
  reader.Integer("thread-pool-min", &iothread.thread_pool_min, 0, kMax);
  reader.Integer("thread-pool-max", &iothread.thread_pool_max, 0, kMax);
  if (reader.ok() && iothread.thread_pool_min > iothread.thread_pool_max) {
    // QEMU's words.
    reader.Fail("thread-pool-min", "thread-pool-min must be smaller or equal to thread-pool-max");
  }
  absl::Status status = reader.Finish();
  if (!status.ok()) return status;
  return iothread;
}

absl::StatusOr<ChardevSpec> ParseChardev(const nlohmann::json& object, Syntax syntax,
                                         const std::string& path) {
  OptionReader reader(object, syntax, path);
  ChardevSpec chardev;
  std::string backend;
  reader.RequiredString("backend", &backend);
  if (reader.ok() && backend != "socket" && backend != "stdio") {
    reader.Fail("backend",
                fmt::format("'{}' is not supported (bexd knows socket, stdio)", backend));
  }
  ReadId(reader, &chardev.id);
  if (backend == "stdio") {
    chardev.stdio = true;
    bool signal = true;  // QEMU's: ^C on a terminal stops the daemon; bexd never reads a terminal
    reader.Bool("signal", &signal);
    absl::Status status = reader.Finish();
    if (!status.ok()) return status;
    return chardev;
  }
  if (reader.ok() && (reader.Has("host") || reader.Has("port"))) {
    reader.Fail(reader.Has("host") ? "host" : "port",
                "TCP sockets are not supported; give a unix socket with path= or fd=");
  }
  if (reader.ok() && reader.Has("fd")) {
    if (reader.Has("path")) reader.Fail("fd", "give either path= or fd=, not both");
    uint64_t fd = 0;
    reader.Integer("fd", &fd, 0, std::numeric_limits<int>::max());
    chardev.fd = static_cast<int>(fd);
  } else {
    ReadSocketPath(reader, &chardev.path);
  }
  bool server = false;
  reader.Bool("server", &server);
  if (reader.ok() && !server) reader.Fail("server", "must be on (bexd listens, never connects)");
  bool wait = false;
  reader.Bool("wait", &wait);
  if (reader.ok() && wait) {
    reader.Fail("wait", "must be off (bexd does not wait for a client before starting)");
  }
  absl::Status status = reader.Finish();
  if (!status.ok()) return status;
  return chardev;
}

absl::StatusOr<MonitorSpec> ParseMonitor(const nlohmann::json& object, Syntax syntax,
                                         const std::string& path) {
  OptionReader reader(object, syntax, path);
  MonitorSpec monitor;
  if (reader.Has("chardev") == reader.Has("path")) {
    reader.Fail(reader.Has("path") ? "path" : "chardev",
                "give exactly one of chardev=ID and path=SOCKET");
  }
  if (reader.Has("chardev")) {
    reader.RequiredString("chardev", &monitor.chardev);
  } else {
    ReadSocketPath(reader, &monitor.path);
  }
  if (reader.ok() && reader.Has("id")) {
    std::string id;  // QEMU names the monitor with it; nothing refers to it here
    ReadId(reader, &id);
  }
  std::string mode = "control";
  reader.String("mode", &mode);
  if (reader.ok() && mode != "control") {
    reader.Fail("mode", fmt::format("'{}' is not supported (bexd speaks QMP: control)", mode));
  }
  reader.Bool("pretty", &monitor.pretty);
  absl::Status status = reader.Finish();
  if (!status.ok()) return status;
  return monitor;
}

}  // namespace bexd::cli
