// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/queue/event_loop.h"

#include <errno.h>

#include "util/eventfd.h"
#include "util/status.h"

namespace bexd::exports {

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create() {
  util::UniqueFd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd) return util::ErrnoStatus(errno, "cannot create an epoll instance");
  absl::StatusOr<util::UniqueFd> stop_fd = util::CreateEventFd();
  if (!stop_fd.ok()) return stop_fd.status();
  std::unique_ptr<EventLoop> loop(new EventLoop(std::move(epoll_fd), std::move(*stop_fd)));
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
    return util::ErrnoStatus(errno, "cannot add a file descriptor to the epoll set");
  }
  return absl::OkStatus();
}

void EventLoop::Unwatch(int fd) {
  // Fails only for an fd that is not in the set, which then needs no removal.
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void EventLoop::RequestStop() {
  stop_requested_.store(true, std::memory_order_release);
  util::SignalEventFd(stop_fd_.get());
}

int EventLoop::Wait(struct epoll_event* events, int capacity, int timeout_ms) {
  int n = ::epoll_wait(epoll_fd_.get(), events, capacity, timeout_ms);
  if (n < 0) return errno == EINTR ? 0 : -errno;
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 == kStopTag) {
      // Drain the counter so the level-triggered stop fd does not keep waking a draining thread;
      // stop_requested_ already records the request.
      util::DrainEventFd(stop_fd_.get());
      continue;
    }
    events[kept++] = events[i];
  }
  return kept;
}

}  // namespace bexd::exports
