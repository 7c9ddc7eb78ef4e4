// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/event_loop.h"

#include <sys/epoll.h>

#include <cerrno>
#include <string>

#include "util/eventfd.h"
#include "util/status.h"

namespace bexd::cli {

EventLoop::EventLoop() : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)) {
  if (!epoll_fd_) {
    status_ = util::ErrnoStatus(errno, "epoll_create1");
    return;
  }
  absl::StatusOr<util::UniqueFd> wake_fd = util::CreateEventFd();
  if (!wake_fd.ok()) {
    status_ = wake_fd.status();
    return;
  }
  wake_fd_ = std::move(*wake_fd);
  epoll_event wake{.events = EPOLLIN, .data = {.u64 = kWakeToken}};
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &wake) != 0) {
    status_ = util::ErrnoStatus(errno, "epoll_ctl(ADD)");
  }
}

absl::Status EventLoop::Add(int fd, uint32_t events, Handler handler) {
  uint64_t token = next_token_++;
  epoll_event event{.events = events, .data = {.u64 = token}};
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
    return util::ErrnoStatus(errno, "epoll_ctl(ADD)");
  }
  registrations_[fd] = {token, std::move(handler)};
  return absl::OkStatus();
}

absl::Status EventLoop::Modify(int fd, uint32_t events) {
  auto it = registrations_.find(fd);
  if (it == registrations_.end()) return absl::NotFoundError("fd is not registered");
  epoll_event event{.events = events, .data = {.u64 = it->second.token}};
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, fd, &event) != 0) {
    return util::ErrnoStatus(errno, "epoll_ctl(MOD)");
  }
  return absl::OkStatus();
}

void EventLoop::Remove(int fd) {
  if (registrations_.erase(fd) == 0) return;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void EventLoop::Post(Task task) {
  {
    std::lock_guard lock(posted_mutex_);
    posted_.push_back(std::move(task));
  }
  util::SignalEventFd(wake_fd_.get());
}

bool EventLoop::RunPosted() {
  util::DrainEventFd(wake_fd_.get());
  // Run outside the lock: a task may post again (it then runs on the next wake-up).
  std::vector<Task> tasks;
  {
    std::lock_guard lock(posted_mutex_);
    tasks.swap(posted_);
  }
  for (Task& task : tasks) task();
  return !tasks.empty();
}

absl::Status EventLoop::RunOnce(int timeout_ms) {
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  int count = ::epoll_wait(epoll_fd_.get(), events, kMaxEvents, timeout_ms);
  if (count < 0) return errno == EINTR ? absl::OkStatus() : util::ErrnoStatus(errno, "epoll_wait");
  for (int i = 0; i < count; ++i) {
    if (events[i].data.u64 == kWakeToken) {
      RunPosted();
      continue;
    }
    // A handler earlier in this batch may have removed this registration (and the fd number may
    // even be reused), so look it up by its token.
    Handler handler;
    for (const auto& [fd, registration] : registrations_) {
      if (registration.token == events[i].data.u64) handler = registration.handler;
    }
    if (handler) handler(events[i].events);
  }
  return absl::OkStatus();
}

}  // namespace bexd::cli
