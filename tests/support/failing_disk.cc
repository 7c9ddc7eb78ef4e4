// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/failing_disk.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

extern char** environ;

namespace bexd::testing {
namespace {

bool WaitFor(const std::function<bool()>& ready, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

uint64_t SizeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

FailingDisk::FailingDisk(const std::string& directory, uint64_t size)
    : path_(directory + "/nbd"), trigger_(directory + "/fail-now") {
  if (std::system("command -v nbdfuse >/dev/null && command -v nbdkit >/dev/null") != 0 ||
      ::access("/dev/fuse", R_OK | W_OK) != 0) {
    why_not_ = "nbdfuse, nbdkit or /dev/fuse is not available";
    return;
  }
  const int mountpoint = ::open(path_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (mountpoint < 0) {
    why_not_ = "cannot create " + path_;
    return;
  }
  ::close(mountpoint);
  std::vector<std::string> args = {"nbdfuse",
                                   path_,
                                   "--command",
                                   "nbdkit",
                                   "-s",
                                   "--filter=error",
                                   "memory",
                                   std::to_string(size),
                                   "error=EIO",
                                   "error-rate=100%",
                                   "error-file=" + trigger_};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // nbdkit logs every injected error; keep the test output readable.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  if (::posix_spawnp(&pid_, "nbdfuse", &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
  if (pid_ < 0) {
    why_not_ = "cannot run nbdfuse";
    return;
  }
  // The mountpoint is empty until the disk is mounted over it.
  if (!WaitFor([&] { return SizeOf(path_) == size; }, std::chrono::seconds(20))) {
    why_not_ = "nbdfuse did not mount " + path_;
    Stop();
  }
}

FailingDisk::~FailingDisk() { Stop(); }

void FailingDisk::SetFailing(bool failing) const {
  if (failing) {
    const int fd = ::open(trigger_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  } else {
    ::unlink(trigger_.c_str());
  }
}

void FailingDisk::Stop() {
  if (pid_ <= 0) return;
  SetFailing(false);
  // A loop device whose detach was deferred (someone still had it open, udev for instance) lets
  // go of the file shortly after; until then the unmount is refused.
  const std::string unmount = "fusermount3 -u '" + path_ + "' 2>/dev/null";
  if (!WaitFor([&] { return std::system(unmount.c_str()) == 0; }, std::chrono::seconds(10))) {
    std::fprintf(stderr, "cannot unmount %s (still open?); detaching it\n", path_.c_str());
    std::system(("fusermount3 -u -z '" + path_ + "'").c_str());
  }
  int status;
  if (!WaitFor([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; },
               std::chrono::seconds(10))) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
  }
  pid_ = -1;
}

}  // namespace bexd::testing
