// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/epoll_set.h"

#include <sys/epoll.h>

#include <cerrno>

namespace bexd::block::qcow2 {

absl::Status WatchForReading(int epoll_fd, std::span<const int> fds) {
  for (int fd : fds) {
    if (fd < 0) continue;
    struct epoll_event event = {};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) != 0) {
      return absl::ErrnoToStatus(errno, "cannot watch a file descriptor with epoll");
    }
  }
  return absl::OkStatus();
}

bool WatchEdgeTriggered(int epoll_fd, int fd) {
  if (fd < 0) return false;
  struct epoll_event event = {};
  event.events = EPOLLIN | EPOLLET;
  event.data.fd = fd;
  return epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &event) == 0;
}

}  // namespace bexd::block::qcow2
