// SPDX-License-Identifier: GPL-2.0-or-later
// How long a queue thread with nothing in flight spins, looking for the next request in user
// memory, before it sleeps in epoll. A sleep costs a wake-up per request at queue depth 1 (a few µs
// of the scheduler on each side, more in a virtual machine); spinning costs a CPU. So the window
// adapts to the gaps the thread sees, as QEMU's iothreads do with poll-max-ns: it grows while work
// keeps arriving soon after the thread runs out of it, and shrinks while the gaps are longer than
// the largest window, down to not spinning at all for an idle or throughput-bound queue.
#pragma once

#include <cstdint>

namespace bexd::exports {

class PollWindow {
 public:
  // `max_ns` 0: never spin.
  explicit PollWindow(uint64_t max_ns) : max_ns_(max_ns) {}

  // Nanoseconds to spin before sleeping now; 0: sleep at once.
  uint64_t ns() const { return ns_; }
  uint64_t max_ns() const { return max_ns_; }

  // The thread ran out of work and found more `gap_ns` later (by spinning, or after a sleep).
  void Record(uint64_t gap_ns);

  // The first window once gaps say spinning pays off; windows double from there.
  static constexpr uint64_t kFirstNs = 4000;

 private:
  const uint64_t max_ns_;
  uint64_t ns_ = 0;
};

}  // namespace bexd::exports
