#include "cli/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <absl/status/status.h>

#include <cerrno>
#include <string>

namespace bexd::cli {
namespace {

absl::Status Errno(const char* what) { return absl::ErrnoToStatus(errno, what); }

}  // namespace

EventLoop::EventLoop()
    : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  epoll_event wake{.events = EPOLLIN, .data = {.u64 = kWakeToken}};
  if (epoll_fd_ < 0) {
    status_ = Errno("epoll_create1");
  } else if (wake_fd_ < 0) {
    status_ = Errno("eventfd");
  } else if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake) != 0) {
    status_ = Errno("epoll_ctl(ADD)");
  }
}

EventLoop::~EventLoop() {
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

absl::Status EventLoop::Add(int fd, uint32_t events, Handler handler) {
  uint64_t token = next_token_++;
  epoll_event event{.events = events, .data = {.u64 = token}};
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) return Errno("epoll_ctl(ADD)");
  registrations_[fd] = {token, std::move(handler)};
  return absl::OkStatus();
}

absl::Status EventLoop::Modify(int fd, uint32_t events) {
  auto it = registrations_.find(fd);
  if (it == registrations_.end()) return absl::NotFoundError("fd is not registered");
  epoll_event event{.events = events, .data = {.u64 = it->second.token}};
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event) != 0) return Errno("epoll_ctl(MOD)");
  return absl::OkStatus();
}

void EventLoop::Remove(int fd) {
  if (registrations_.erase(fd) == 0) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void EventLoop::Post(Task task) {
  {
    std::lock_guard lock(posted_mutex_);
    posted_.push_back(std::move(task));
  }
  const uint64_t one = 1;
  // Only fails if the counter is about to overflow, and then the loop is awake anyway.
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void EventLoop::RunPosted() {
  uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(wake_fd_, &count, sizeof(count));
  // Run outside the lock: a task may post again (it then runs on the next wake-up).
  std::vector<Task> tasks;
  {
    std::lock_guard lock(posted_mutex_);
    tasks.swap(posted_);
  }
  for (Task& task : tasks) task();
}

absl::Status EventLoop::RunOnce(int timeout_ms) {
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  int count = ::epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
  if (count < 0) return errno == EINTR ? absl::OkStatus() : Errno("epoll_wait");
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
