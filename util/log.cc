// SPDX-License-Identifier: GPL-2.0-or-later
#include "util/log.h"

#include <unistd.h>

#include <atomic>
#include <string>

namespace bexd::log {
namespace {

std::atomic<Level> g_level{Level::kInfo};

const char* LevelName(Level level) {
  switch (level) {
    case Level::kError:
      return "error";
    case Level::kWarn:
      return "warning";
    case Level::kInfo:
      return "info";
    case Level::kDebug:
      return "debug";
  }
  return "?";
}

}  // namespace

void SetLevel(Level level) { g_level.store(level, std::memory_order_relaxed); }
Level GetLevel() { return g_level.load(std::memory_order_relaxed); }

bool ParseLevel(std::string_view name, Level* level) {
  for (Level l : {Level::kError, Level::kWarn, Level::kInfo, Level::kDebug}) {
    if (name == LevelName(l) || (l == Level::kWarn && name == "warn")) {
      *level = l;
      return true;
    }
  }
  return false;
}

void Write(Level level, std::string_view message) {
  std::string line = fmt::format("bexd: {}: {}\n", LevelName(level), message);
  // A short write to stderr is not worth retrying; the line is diagnostic only.
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace bexd::log
