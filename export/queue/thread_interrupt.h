// SPDX-License-Identifier: GPL-2.0-or-later
// Ends a queue thread's system call from another thread. Some waits end only for a signal: an
// idle blocking read of /dev/fuse, an idle io_uring_enter, and a write to an eventfd a
// vhost-user frontend passed, whose counter it can fill and whose O_NONBLOCK it can clear (the
// open file description is shared). The signal's handler does nothing and is installed without
// SA_RESTART, so the call returns EINTR and the thread sees its stop request.
#pragma once

#include <absl/status/status.h>
#include <pthread.h>

namespace bexd::exports {

// Installs the handler once per process; later calls return the first result.
absl::Status InstallThreadInterrupt();

// Unblocks the signal in the calling thread (a thread inherits the mask of its creator, which
// may block everything).
absl::Status AcceptThreadInterrupt();

// Sends the signal to `thread`, which must not have been joined yet. A thread that is not in a
// blocking call runs the empty handler and carries on, so the caller must make the thread check
// its stop flag before each wait and repeat the interrupt until the thread has ended.
void InterruptThread(pthread_t thread);

}  // namespace bexd::exports
