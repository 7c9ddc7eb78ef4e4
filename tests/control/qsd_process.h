// SPDX-License-Identifier: GPL-2.0-or-later
// A real qemu-storage-daemon beside bexd, for tests that compare the two.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace bexd::testing {

// qemu-storage-daemon with a QMP socket, stopped at the end.
class Qsd {
 public:
  Qsd(std::vector<std::string> args, const std::string& socket) {
    args.insert(args.begin(), "qemu-storage-daemon");
    args.insert(args.end(), {"--chardev", "socket,id=m0,server=on,wait=off,path=" + socket,
                             "--monitor", "chardev=m0"});
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    if (::posix_spawnp(&pid_, "qemu-storage-daemon", nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
    }
  }
  ~Qsd() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

}  // namespace bexd::testing
