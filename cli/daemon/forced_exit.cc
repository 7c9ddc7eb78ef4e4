// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/forced_exit.h"

#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <system_error>

#include "export/fuse_dev/fuse_mount.h"
#include "util/clock.h"
#include "util/eventfd.h"
#include "util/log.h"

namespace bexd::cli {

ForcedExit::ForcedExit(int signal_fd) {
  absl::StatusOr<util::UniqueFd> done = util::CreateEventFd();
  if (!done.ok()) {
    log::Warn("a second stop signal will not force an exit: {}",
              std::string(done.status().message()));
    return;
  }
  done_fd_ = *std::move(done);
  try {
    thread_ = std::thread(&ForcedExit::Watch, this, signal_fd);
  } catch (const std::system_error& error) {
    // The stop itself needs no thread of its own: it goes on without this watch.
    log::Warn("a second stop signal will not force an exit: cannot start a thread: {}",
              error.what());
  }
}

ForcedExit::~ForcedExit() {
  if (!thread_.joinable()) return;
  util::SignalEventFd(done_fd_.get());
  thread_.join();
}

void ForcedExit::Watch(int signal_fd) {
  const uint64_t start_ns = util::MonotonicNs();
  struct pollfd fds[2] = {{signal_fd, POLLIN, 0}, {done_fd_.get(), POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) continue;  // EINTR
    if (fds[1].revents != 0) return;
    signalfd_siginfo info;
    if (::read(signal_fd, &info, sizeof(info)) != sizeof(info)) continue;
    const std::chrono::nanoseconds stopping(util::MonotonicNs() - start_ns);
    if (stopping < kGrace) {
      log::Warn(
          "received SIG{} again {} ms into the stop; still stopping cleanly (a stop signal {} s "
          "or more into the stop exits at once, without waiting for the exports to drain)",
          ::sigabbrev_np(info.ssi_signo),
          std::chrono::duration_cast<std::chrono::milliseconds>(stopping).count(), kGrace.count());
      continue;
    }
    log::Error(
        "received SIG{} while stopping; exiting at once with status 1 without waiting for "
        "the exports to drain: requests still in flight fail, and what they wrote may be "
        "lost",
        ::sigabbrev_np(info.ssi_signo));
    exports::DetachAllMounts();
    ::_exit(1);
  }
}

}  // namespace bexd::cli
