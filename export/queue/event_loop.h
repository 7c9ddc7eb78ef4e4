// SPDX-License-Identifier: GPL-2.0-or-later
// One thread's wait point: an epoll set plus a stop eventfd that any thread may signal. A queue
// thread registers its fds once, then alternates between doing work and Wait(); RequestStop() from
// another thread wakes it and stays visible through stop_requested().
#pragma once

#include <absl/status/statusor.h>
#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "util/unique_fd.h"

namespace bexd::exports {

class EventLoop {
 public:
  static absl::StatusOr<std::unique_ptr<EventLoop>> Create();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Watches `fd` for `events` (EPOLLIN, EPOLLET, ...); Wait() reports them with `tag`. The tag
  // kStopTag is reserved.
  absl::Status Watch(int fd, uint32_t events, uint64_t tag);
  // Stops watching `fd` (e.g. one that hung up and would otherwise be reported forever).
  void Unwatch(int fd);

  // Safe from any thread, any number of times.
  void RequestStop();
  bool stop_requested() const { return stop_requested_.load(std::memory_order_acquire); }

  // Blocks until a watched fd is ready, a stop is requested, or `timeout_ms` passes (-1: no limit).
  // Fills `events` with what became ready (data.u64 holds the tag; a stop wake-up is consumed and
  // not reported) and returns how many, 0 when interrupted by a signal, or -errno.
  int Wait(struct epoll_event* events, int capacity, int timeout_ms);

  static constexpr uint64_t kStopTag = ~uint64_t{0};

 private:
  EventLoop(util::UniqueFd epoll_fd, util::UniqueFd stop_fd)
      : epoll_fd_(std::move(epoll_fd)), stop_fd_(std::move(stop_fd)) {}

  util::UniqueFd epoll_fd_;
  util::UniqueFd stop_fd_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace bexd::exports
