// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_dev/read_interrupt.h"

#include <signal.h>

#include <cstring>
#include <string>

namespace bexd::exports {
namespace {

// SIGUSR2 is otherwise unused by bexd; with the handler installed, a stray one sent to the
// process only costs a queue thread a retried read instead of killing the daemon.
constexpr int kReadInterruptSignal = SIGUSR2;

void IgnoreInterrupt(int) {}

}  // namespace

absl::Status InstallReadInterrupt() {
  static const absl::Status installed = [] {
    struct sigaction action = {};
    action.sa_handler = &IgnoreInterrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: the interrupted read must return EINTR
    if (::sigaction(kReadInterruptSignal, &action, nullptr) != 0) {
      return absl::InternalError(std::string("cannot install the SIGUSR2 handler: ") +
                                 std::strerror(errno));
    }
    return absl::OkStatus();
  }();
  return installed;
}

absl::Status AcceptReadInterrupt() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, kReadInterruptSignal);
  if (const int error = ::pthread_sigmask(SIG_UNBLOCK, &signals, nullptr); error != 0) {
    return absl::InternalError(std::string("cannot unblock SIGUSR2: ") + std::strerror(error));
  }
  return absl::OkStatus();
}

void InterruptRead(pthread_t thread) { ::pthread_kill(thread, kReadInterruptSignal); }

}  // namespace bexd::exports
