// SPDX-License-Identifier: GPL-2.0-or-later
// The main thread's epoll loop: the signalfd, the QMP sockets, and tasks other threads post to
// the main thread. Handlers may add or remove any registration, including their own, while events
// are being dispatched.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "util/unique_fd.h"

namespace bexd::cli {

class EventLoop {
 public:
  using Handler = std::function<void(uint32_t events)>;
  using Task = std::function<void()>;

  EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  absl::Status status() const { return status_; }
  // `fd` stays owned by the caller; remove it before closing it.
  absl::Status Add(int fd, uint32_t events, Handler handler);
  absl::Status Modify(int fd, uint32_t events);
  void Remove(int fd);
  // Safe from any thread: runs `task` on the loop's thread during a later RunOnce(), in posting
  // order. Tasks still pending when the loop is destroyed never run, so the loop must outlive
  // every thread that may post.
  void Post(Task task);
  // Waits for events (up to `timeout_ms`, -1 for no limit) and runs their handlers.
  absl::Status RunOnce(int timeout_ms);
  // Runs the tasks posted so far, without waiting or running handlers; false if there were none.
  bool RunPosted();

 private:
  struct Registration {
    uint64_t token;
    Handler handler;
  };
  // The epoll token of `wake_fd_`; registrations count from 1.
  static constexpr uint64_t kWakeToken = 0;

  util::UniqueFd epoll_fd_;
  util::UniqueFd wake_fd_;  // an eventfd: readable while tasks are pending
  absl::Status status_;
  uint64_t next_token_ = 1;
  std::unordered_map<int, Registration> registrations_;
  std::mutex posted_mutex_;
  std::vector<Task> posted_;
};

}  // namespace bexd::cli
