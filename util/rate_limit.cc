// SPDX-License-Identifier: GPL-2.0-or-later
#include "util/rate_limit.h"

#include <string>

#include "util/clock.h"

namespace bexd::log {

bool RateLimit::Admit(uint64_t* suppressed) {
  const int64_t now = static_cast<int64_t>(util::MonotonicNs());
  int64_t start = window_start_ns_.load(std::memory_order_relaxed);
  if (start == INT64_MIN || now - start >= interval_ns_) {
    // The first thread to see the window expire opens the next one; the others count into it.
    if (window_start_ns_.compare_exchange_strong(start, now, std::memory_order_relaxed)) {
      admitted_in_window_.store(0, std::memory_order_relaxed);
    }
  }
  if (admitted_in_window_.fetch_add(1, std::memory_order_relaxed) >= burst_) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
  return true;
}

void WriteLimited(RateLimit& limit, Level level, std::string_view message) {
  uint64_t suppressed = 0;
  if (!limit.Admit(&suppressed)) return;
  if (suppressed == 0) {
    Write(level, message);
    return;
  }
  Write(level, fmt::format("{} ({} similar messages suppressed)", message, suppressed));
}

}  // namespace bexd::log
