// SPDX-License-Identifier: GPL-2.0-or-later
// Wakes a thread that waits in a blocking read() of /dev/fuse. The kernel ends such a wait only
// for a request, the end of the connection, or a signal; a stop needs the signal. The signal's
// handler does nothing and is installed without SA_RESTART, so the read returns EINTR.
#pragma once

#include <absl/status/status.h>
#include <pthread.h>

namespace bexd::exports {

// Installs the handler once per process; later calls return the first result. Call before
// starting a thread that will wait in a blocking read.
absl::Status InstallReadInterrupt();

// Unblocks the signal in the calling thread (a thread inherits the mask of its creator, which
// may block everything).
absl::Status AcceptReadInterrupt();

// Sends the signal to `thread`, which must not have been joined yet. A thread that is not in a
// blocking call runs the empty handler and carries on, so the caller must make the thread check
// its stop flag before each wait and repeat the interrupt until the thread has ended.
void InterruptRead(pthread_t thread);

}  // namespace bexd::exports
