// SPDX-License-Identifier: GPL-2.0-or-later
// The one clock bexd measures intervals with (latencies, rate-limit windows, waits): monotonic,
// unaffected by changes of the wall clock, cheap enough for the I/O path (vDSO).
#pragma once

#include <time.h>

#include <cstdint>

namespace bexd::util {

inline uint64_t MonotonicNs() {
  struct timespec now;
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);
}

}  // namespace bexd::util
