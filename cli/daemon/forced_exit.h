// SPDX-License-Identifier: GPL-2.0-or-later
// A way out of a stop that cannot finish. Stopping drains every export, and storage that never
// answers (an NBD server that hangs, say) keeps a drain waiting forever. While a ForcedExit
// lives, another SIGINT, SIGTERM or SIGHUP exits the process at once with status 1: the mounts
// are detached and requests still in flight are lost, as with SIGKILL, but the mountpoints are
// left usable. Only once the stop has run for kGrace: a repeat that comes sooner is not somebody
// giving up on a stuck stop but the same stop asked twice (GNU timeout signals the process and
// its group, Ctrl-C pressed twice), and it must not cost the final flush.
#pragma once

#include <chrono>
#include <thread>

#include "util/unique_fd.h"

namespace bexd::cli {

class ForcedExit {
 public:
  static constexpr std::chrono::seconds kGrace{3};

  // `signal_fd`: the signalfd the stop signals are read from (borrowed).
  explicit ForcedExit(int signal_fd);
  ~ForcedExit();  // stops watching
  ForcedExit(const ForcedExit&) = delete;
  ForcedExit& operator=(const ForcedExit&) = delete;

 private:
  void Watch(int signal_fd);

  util::UniqueFd done_fd_;  // eventfd: the stop has finished
  std::thread thread_;
};

}  // namespace bexd::cli
