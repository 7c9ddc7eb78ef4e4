// SPDX-License-Identifier: GPL-2.0-or-later
// bexd's command line: QSD-style --blockdev/--export/--object/--chardev/--monitor plus the
// daemon options. Every option is checked here, before anything is opened or mounted.
#pragma once

#include <absl/status/statusor.h>

#include <string>
#include <string_view>
#include <vector>

#include "cli/config/daemon_config.h"
#include "util/log.h"

namespace bexd::cli {

struct CommandLine {
  DaemonConfig config;
  bool help = false;
  // What a `help` value of an item option asked for (item_help.h); printed instead of running.
  std::string item_help;
  bool version = false;
  bool daemonize = false;
  bool demo = false;
  std::string demo_dir;  // empty: the default state directory
  std::string pidfile;
  log::Level log_level = log::Level::kWarn;  // quiet by default, as QSD
};

// `args` excludes the program name. With no arguments at all, bexd runs the demo.
absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string_view>& args);

// The text --help prints.
std::string UsageText();

}  // namespace bexd::cli
