// SPDX-License-Identifier: GPL-2.0-or-later
// --object iothread, --chardev socket and --monitor: the options that set up the daemon itself
// rather than its nodes and exports.
#pragma once

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include <string>

#include "cli/config/option_reader.h"

namespace bexd::cli {

// --object iothread: QEMU's properties are kept for query-iothreads, whose values scripts read
// back; they change nothing here, since an iothread is only a name (the threads belong to the
// exports' queues, which poll by their own rule: docs/control.md).
struct IothreadObject {
  std::string id;
  uint64_t poll_max_ns = 32768;  // QEMU's defaults
  uint64_t poll_grow = 0;
  uint64_t poll_shrink = 0;
  uint64_t aio_max_batch = 0;
  uint64_t thread_pool_min = 0;
  uint64_t thread_pool_max = 64;
  bool operator==(const IothreadObject&) const = default;
};

absl::StatusOr<IothreadObject> ParseIothreadObject(const nlohmann::json& object, Syntax syntax,
                                                   const std::string& path = "");

struct ChardevSpec {
  std::string id;
  std::string path;    // the unix socket bexd listens on, or
  int fd = -1;         // a listening socket bexd was given (fd=N), or
  bool stdio = false;  // QMP over the daemon's stdin and stdout
};
// --chardev socket,id=ID,path=PATH,server=on,wait=off, --chardev socket,id=ID,fd=N,server=on,
// --chardev stdio,id=ID
absl::StatusOr<ChardevSpec> ParseChardev(const nlohmann::json& object, Syntax syntax,
                                         const std::string& path = "");

struct MonitorSpec {
  std::string chardev;  // set for chardev=ID, resolved once every --chardev is known
  std::string path;     // set for path=SOCKET (and after resolution)
  int fd = -1;          // after resolution: the chardev's fd=N
  bool stdio = false;   // after resolution: a stdio chardev
  bool pretty = false;  // replies indented over several lines, as QEMU's pretty=on
};
// --monitor path=SOCKET or --monitor chardev=ID, with optional mode=control and pretty=on|off.
absl::StatusOr<MonitorSpec> ParseMonitor(const nlohmann::json& object, Syntax syntax,
                                         const std::string& path = "");

}  // namespace bexd::cli
