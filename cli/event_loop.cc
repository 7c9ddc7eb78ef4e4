#include "cli/event_loop.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <absl/status/status.h>

#include <cerrno>
#include <string>

namespace bexd::cli {
namespace {

absl::Status Errno(const char* what) { return absl::ErrnoToStatus(errno, what); }

}  // namespace

EventLoop::EventLoop() : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)) {
  if (epoll_fd_ < 0) status_ = Errno("epoll_create1");
}

EventLoop::~EventLoop() {
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

absl::Status EventLoop::RunOnce(int timeout_ms) {
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  int count = ::epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
  if (count < 0) return errno == EINTR ? absl::OkStatus() : Errno("epoll_wait");
  for (int i = 0; i < count; ++i) {
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
