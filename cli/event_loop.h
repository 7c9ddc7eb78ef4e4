// The main thread's epoll loop: the signalfd and the QMP sockets. Handlers may add or remove any
// registration, including their own, while events are being dispatched.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <functional>
#include <unordered_map>

namespace bexd::cli {

class EventLoop {
 public:
  using Handler = std::function<void(uint32_t events)>;

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  absl::Status status() const { return status_; }
  // `fd` stays owned by the caller; remove it before closing it.
  absl::Status Add(int fd, uint32_t events, Handler handler);
  absl::Status Modify(int fd, uint32_t events);
  void Remove(int fd);
  // Waits for events (up to `timeout_ms`, -1 for no limit) and runs their handlers.
  absl::Status RunOnce(int timeout_ms);

 private:
  struct Registration {
    uint64_t token;
    Handler handler;
  };

  int epoll_fd_ = -1;
  absl::Status status_;
  uint64_t next_token_ = 1;
  std::unordered_map<int, Registration> registrations_;
};

}  // namespace bexd::cli
