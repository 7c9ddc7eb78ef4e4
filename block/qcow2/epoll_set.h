// SPDX-License-Identifier: GPL-2.0-or-later
// An epoll fd that becomes readable when any of several fds does: a qcow2 queue's event_fd() over
// its own eventfd and its child queues' fds, and the metadata thread's wait.
#pragma once

#include <absl/status/status.h>

#include <span>

namespace bexd::block::qcow2 {

// Adds every fd that is not negative to `epoll_fd`, level-triggered, for reading.
absl::Status WatchForReading(int epoll_fd, std::span<const int> fds);
// Makes the watch of `fd` (added by WatchForReading) edge-triggered; false if `fd` is negative or
// the watch could not be changed.
bool WatchEdgeTriggered(int epoll_fd, int fd);

}  // namespace bexd::block::qcow2
