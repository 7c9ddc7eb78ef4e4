// SPDX-License-Identifier: GPL-2.0-or-later
// An eventfd as a wake-up between threads: one side signals, the other waits for it to become
// readable (in epoll or poll) and drains it. Used for stop requests, posted tasks, and the vring
// call and error notifications of vhost-user.
#pragma once

#include <absl/status/statusor.h>

#include "util/unique_fd.h"

namespace bexd::util {

// A non-blocking, close-on-exec eventfd with its counter at 0.
absl::StatusOr<UniqueFd> CreateEventFd();

// Adds 1 to the counter, making the fd readable. Never blocks: a saturated counter (EAGAIN) is
// readable already. Safe from any thread.
void SignalEventFd(int fd);

// Resets the counter to 0, so a level-triggered wait does not report it again.
void DrainEventFd(int fd);

// Whether `fd` is an eventfd (its /proc/self/fd link is the kernel's "anon_inode:[eventfd]"),
// e.g. one another process passed: every write to an eventfd wakes an edge-triggered epoll
// waiter, so such a waiter need not drain it. False if it cannot tell (no /proc).
bool IsEventFd(int fd);

}  // namespace bexd::util
