// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/queue/thread_interrupt.h"

#include <signal.h>

#include <cstring>
#include <string>

namespace bexd::exports {
namespace {

// SIGUSR2 is otherwise unused by bexd; with the handler installed, a stray one sent to the
// process only costs a queue thread a retried call instead of killing the daemon.
constexpr int kInterruptSignal = SIGUSR2;

void IgnoreInterrupt(int) {}

}  // namespace

absl::Status InstallThreadInterrupt() {
  static const absl::Status installed = [] {
    struct sigaction action = {};
    action.sa_handler = &IgnoreInterrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: the interrupted call must return EINTR
    if (::sigaction(kInterruptSignal, &action, nullptr) != 0) {
      return absl::InternalError(std::string("cannot install the SIGUSR2 handler: ") +
                                 std::strerror(errno));
    }
    return absl::OkStatus();
  }();
  return installed;
}

absl::Status AcceptThreadInterrupt() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, kInterruptSignal);
  if (const int error = ::pthread_sigmask(SIG_UNBLOCK, &signals, nullptr); error != 0) {
    return absl::InternalError(std::string("cannot unblock SIGUSR2: ") + std::strerror(error));
  }
  return absl::OkStatus();
}

void InterruptThread(pthread_t thread) { ::pthread_kill(thread, kInterruptSignal); }

}  // namespace bexd::exports
