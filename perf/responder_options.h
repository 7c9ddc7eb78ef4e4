// SPDX-License-Identifier: GPL-2.0-or-later
// Command line of the limit responder.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <span>
#include <string>

#include "perf/responder.h"
#include "util/log.h"

namespace bexd::perf {

struct ResponderOptions {
  std::string mountpoint;  // an existing regular file
  uint32_t queues = 1;     // /dev/fuse fds (the first plus clones), one thread each
  ResponderConfig config;
  log::Level log_level = log::Level::kWarn;
};

inline constexpr uint32_t kMaxQueues = 256;

// Parses argv[1..]; options are "--name=value" or "--name value".
absl::StatusOr<ResponderOptions> ParseResponderOptions(std::span<char* const> args);

// One paragraph describing the options, for --help and errors.
const char* ResponderUsage();

}  // namespace bexd::perf
