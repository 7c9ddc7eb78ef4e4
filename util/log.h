// SPDX-License-Identifier: GPL-2.0-or-later
// Levelled logging to stderr: one line per event, written with a single write(2) so lines from
// several threads never interleave. Nothing on the I/O hot path should log below kWarn.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace bexd::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void SetLevel(Level level);
Level GetLevel();
// Parses "error", "warn", "info" or "debug"; false for anything else.
bool ParseLevel(std::string_view name, Level* level);
void Write(Level level, std::string_view message);

template <typename... Args>
void At(Level level, fmt::format_string<Args...> format, Args&&... args) {
  if (level > GetLevel()) return;
  Write(level, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void Error(fmt::format_string<Args...> format, Args&&... args) {
  At(Level::kError, format, std::forward<Args>(args)...);
}
template <typename... Args>
void Warn(fmt::format_string<Args...> format, Args&&... args) {
  At(Level::kWarn, format, std::forward<Args>(args)...);
}
template <typename... Args>
void Info(fmt::format_string<Args...> format, Args&&... args) {
  At(Level::kInfo, format, std::forward<Args>(args)...);
}
template <typename... Args>
void Debug(fmt::format_string<Args...> format, Args&&... args) {
  At(Level::kDebug, format, std::forward<Args>(args)...);
}

}  // namespace bexd::log
