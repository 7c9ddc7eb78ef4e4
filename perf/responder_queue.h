// SPDX-License-Identifier: GPL-2.0-or-later
// One queue of the limit responder: a thread that reads requests from its /dev/fuse fd and writes
// each answer back on the same fd (the kernel matches a reply only on the fd that read the
// request).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "perf/responder.h"

namespace bexd::perf {

class ResponderQueue {
 public:
  // Starts the thread. `fd` stays owned by the caller and must outlive Join(). When the thread
  // ends it writes 1 to the eventfd `done_fd` so the main thread can notice an early end.
  ResponderQueue(const Responder& responder, int fd, uint32_t index, int done_fd);
  ResponderQueue(const ResponderQueue&) = delete;
  ResponderQueue& operator=(const ResponderQueue&) = delete;
  ~ResponderQueue();

  // Waits for the thread, which ends when the connection goes away (unmount or abort).
  void Join();
  // True if the thread ended on an error rather than on the end of the connection.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Requests answered; exact once Join() returned.
  uint64_t answered() const { return answered_.load(std::memory_order_relaxed); }

 private:
  void Run();
  bool Serve();

  const Responder& responder_;
  const int fd_;
  const uint32_t index_;
  const int done_fd_;
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> answered_{0};
  std::thread thread_;
};

}  // namespace bexd::perf
