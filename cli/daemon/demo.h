// SPDX-License-Identifier: GPL-2.0-or-later
// The demo bexd runs with no options (or --demo): a 64 MiB raw image with a recognisable label,
// exported as a file over FUSE, with a QMP socket and a pidfile, all in one state directory.
// Running it again reuses the image, so what was written to it survives.
#pragma once

#include <absl/status/statusor.h>

#include <string>

#include "cli/config/command_line.h"

namespace bexd::cli {

struct DemoPaths {
  std::string dir;
  std::string image;       // the raw image
  std::string mountpoint;  // where the export shows the image
  std::string monitor;     // QMP socket
  std::string pidfile;
};

inline constexpr uint64_t kDemoImageBytes = 64 << 20;
// The first bytes of the demo image, and of every MiB after it ("MiB 1", "MiB 2", ...).
inline constexpr std::string_view kDemoLabel = "bexd demo image";

// Creates the state directory, the image (if missing) and the mountpoint (clearing a mount left
// by a demo that was killed), then adds the demo's node, export, monitor and pidfile to
// `command_line`. `dir` empty: $XDG_STATE_HOME/bexd/demo, else ~/.local/state/bexd/demo.
absl::StatusOr<DemoPaths> SetUpDemo(const std::string& dir, CommandLine* command_line);

// What to try once the demo runs.
std::string DemoInstructions(const DemoPaths& paths);

}  // namespace bexd::cli
