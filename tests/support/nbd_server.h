// SPDX-License-Identifier: GPL-2.0-or-later
// A real NBD server for tests (nbdkit, qemu-nbd, or either under `ip netns exec`), run in the
// foreground as a child of the test and killed at the end. The command must write `pid_file`
// once it accepts connections (nbdkit -P, qemu-nbd --pid-file): that is how Start() knows it is
// ready. Kill() and Start() again restart it with the same command, as a server that went away
// and came back.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace bexd::testing {

class NbdServer {
 public:
  // `log_file` receives the server's stdout and stderr; `socket` (or "" for TCP) is removed
  // before every start, since nbdkit refuses to replace the one a killed server left behind.
  NbdServer(std::vector<std::string> command, std::string pid_file, std::string log_file,
            std::string socket = "");
  ~NbdServer() { Kill(); }
  NbdServer(const NbdServer&) = delete;
  NbdServer& operator=(const NbdServer&) = delete;

  // Starts the server and waits (up to 20 s) until it has written its pid file; false (with the
  // reason in why_not()) if it exits or does not get there. Call it from a thread that lives as
  // long as the server should: nbdkit sets PR_SET_PDEATHSIG (SIGTERM) on itself, and the kernel
  // sends that when the thread that started it ends, not only the process.
  bool Start();
  // SIGKILL and reap: the server goes away without a word, as in a crash.
  void Kill();
  // Sends `signal` and returns: SIGTERM (as `systemctl stop` sends) shuts the server down
  // cleanly, which may mean waiting for its clients to disconnect; SIGSTOP makes it hang.
  void Signal(int signal);
  // Reaps the server if it exits within `limit`; false if it is still running.
  bool WaitExit(std::chrono::seconds limit);
  bool running() const { return pid_ > 0; }
  const std::string& why_not() const { return why_not_; }

 private:
  std::vector<std::string> command_;
  std::string pid_file_;
  std::string log_file_;
  std::string socket_;
  std::string why_not_;
  pid_t pid_ = -1;
};

// Whether `program` can be run (found on PATH).
bool HaveProgram(const std::string& program);

}  // namespace bexd::testing
