// SPDX-License-Identifier: GPL-2.0-or-later
// --daemonize: the process forks early; the parent stays until the child reports how start-up
// ended and exits 0 only if it succeeded, printing the child's error otherwise.
#pragma once

#include <absl/status/status.h>

#include <string_view>

#include "util/unique_fd.h"

namespace bexd::cli {

class StartupReport {
 public:
  // Without daemonizing: results are printed by the caller as usual.
  StartupReport() = default;
  // Forks. Returns only in the child (a new session); the parent waits and exits.
  static StartupReport Daemonize();

  bool daemonized() const { return static_cast<bool>(pipe_fd_); }
  // Child: start-up succeeded. Lets the parent exit 0, then detaches from the terminal (stdio to
  // /dev/null) and from the current directory.
  void Succeeded();
  // Child: start-up failed with `message`; the parent prints it and exits 1.
  void Failed(std::string_view message);

 private:
  explicit StartupReport(util::UniqueFd pipe_fd) : pipe_fd_(std::move(pipe_fd)) {}

  util::UniqueFd pipe_fd_;  // the child's end of the pipe to the waiting parent
};

}  // namespace bexd::cli
