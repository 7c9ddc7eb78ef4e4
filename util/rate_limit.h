// SPDX-License-Identifier: GPL-2.0-or-later
// Rate limiting for log lines that someone outside the daemon can trigger (a guest, a FUSE client,
// a QMP client): each such message site owns one RateLimit, so a flood costs a few lines per
// interval, and the next line that gets through says how many were dropped.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>

#include "util/log.h"

namespace bexd::log {

class RateLimit {
 public:
  // At most `burst` lines per `interval`; lock-free, so queue threads may share one site.
  static constexpr int kDefaultBurst = 5;
  static constexpr std::chrono::seconds kDefaultInterval{10};

  constexpr RateLimit() = default;
  constexpr RateLimit(int burst, std::chrono::nanoseconds interval)
      : burst_(burst), interval_ns_(interval.count()) {}

  // True when a line may be written now; then *suppressed holds how many lines this site dropped
  // since the last one it let through.
  bool Admit(uint64_t* suppressed);

 private:
  int burst_ = kDefaultBurst;
  int64_t interval_ns_ = std::chrono::nanoseconds(kDefaultInterval).count();
  std::atomic<int64_t> window_start_ns_{INT64_MIN};
  std::atomic<int> admitted_in_window_{0};
  std::atomic<uint64_t> suppressed_{0};
};

// Writes the line when `limit` admits it, adding how many lines were dropped before it.
void WriteLimited(RateLimit& limit, Level level, std::string_view message);

template <typename... Args>
void Limited(RateLimit& limit, Level level, fmt::format_string<Args...> format, Args&&... args) {
  if (level > GetLevel()) return;
  WriteLimited(limit, level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace bexd::log
