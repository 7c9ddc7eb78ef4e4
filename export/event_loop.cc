#include "export/event_loop.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

namespace bexd::exp {
namespace {

absl::Status ErrnoStatus(int error, const char* what) {
  return absl::InternalError(std::string(what) + ": " + std::strerror(error));
}

}  // namespace

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create() {
  UniqueFd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd) return ErrnoStatus(errno, "cannot create an epoll instance");
  UniqueFd stop_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_fd) return ErrnoStatus(errno, "cannot create the stop eventfd");
  std::unique_ptr<EventLoop> loop(new EventLoop(std::move(epoll_fd), std::move(stop_fd)));
  if (absl::Status status = loop->Watch(loop->stop_fd_.get(), EPOLLIN, kStopTag); !status.ok()) {
    return status;
  }
  return loop;
}

absl::Status EventLoop::Watch(int fd, uint32_t events, uint64_t tag) {
  struct epoll_event event = {};
  event.events = events;
  event.data.u64 = tag;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
    return ErrnoStatus(errno, "cannot add a file descriptor to the epoll set");
  }
  return absl::OkStatus();
}

void EventLoop::Unwatch(int fd) {
  // Fails only for an fd that is not in the set, which then needs no removal.
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void EventLoop::RequestStop() {
  stop_requested_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  // Only EAGAIN (counter saturated, so already readable) can fail here; either way Wait() wakes.
  [[maybe_unused]] ssize_t n = ::write(stop_fd_.get(), &one, sizeof(one));
}

int EventLoop::Wait(struct epoll_event* events, int capacity, int timeout_ms) {
  int n = ::epoll_wait(epoll_fd_.get(), events, capacity, timeout_ms);
  if (n < 0) return errno == EINTR ? 0 : -errno;
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 == kStopTag) {
      // Drain the counter so the level-triggered stop fd does not keep waking a draining thread;
      // stop_requested_ already records the request.
      uint64_t count;
      [[maybe_unused]] ssize_t r = ::read(stop_fd_.get(), &count, sizeof(count));
      continue;
    }
    events[kept++] = events[i];
  }
  return kept;
}

}  // namespace bexd::exp
