// SPDX-License-Identifier: GPL-2.0-or-later
// Boots a Linux guest under QEMU against bexd's vhost-user-fs export (tests/guest/
// run-guest-test.sh): the guest mounts the export over virtio-fs, checks the image file, writes
// and reads back data, and the host then checks the backing file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr char kScript[] = BEXD_SOURCE_DIR "/tests/guest/run-guest-test.sh";
// The guest itself gets kGuestLimit; the rest covers a first kernel download and the host checks.
// Both stay below ctest's 300 s so a stuck run fails here, with its output, rather than in ctest.
constexpr std::chrono::seconds kGuestLimit{180};
constexpr std::chrono::seconds kRunLimit{270};
constexpr std::chrono::seconds kStopGrace{10};

bool ExecutableInPath(std::string_view name) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
  while (!dirs.empty()) {
    size_t end = dirs.find(':');
    std::string dir(dirs.substr(0, end));
    dirs = end == std::string_view::npos ? std::string_view() : dirs.substr(end + 1);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + std::string(name);
    if (access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

struct RunResult {
  bool timed_out = false;
  int wait_status = 0;
  std::string output;  // stdout and stderr, interleaved
};

using Clock = std::chrono::steady_clock;

// Appends what arrives on `fd` to `output` until end of file (true) or `until` (false).
bool ReadUntil(int fd, Clock::time_point until, std::string& output) {
  while (Clock::now() < until) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    pollfd poll_fd{.fd = fd, .events = POLLIN, .revents = 0};
    int ready = poll(&poll_fd, 1, static_cast<int>(left.count()) + 1);
    if (ready < 0 && errno != EINTR) return false;
    if (ready <= 0) continue;
    char buffer[4096];
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n > 0) {
      output.append(buffer, n);
    } else if (n == 0 || errno != EINTR) {
      return true;
    }
  }
  return false;
}

// Waits for `pid` until `until`; true once it is reaped.
bool ReapUntil(pid_t pid, Clock::time_point until, int& wait_status) {
  do {
    if (waitpid(pid, &wait_status, WNOHANG) == pid) return true;
    usleep(100'000);
  } while (Clock::now() < until);
  return false;
}

// Runs argv in a new process group and collects its output. When `limit` passes, the whole group
// (the script, QEMU and the backend) gets SIGTERM, and SIGKILL kStopGrace later; what the script
// prints while it stops is kept.
RunResult RunBounded(const std::vector<std::string>& argv, std::chrono::seconds limit) {
  RunResult result;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return result;
  }
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  if (pid < 0) {
    close(pipe_fds[0]);
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return result;
  }
  setpgid(pid, pid);  // also here, so the group exists before any kill below

  const Clock::time_point deadline = Clock::now() + limit;
  ReadUntil(pipe_fds[0], deadline, result.output);
  if (!ReapUntil(pid, deadline, result.wait_status)) {
    result.timed_out = true;
    kill(-pid, SIGTERM);
    const Clock::time_point grace = Clock::now() + kStopGrace;
    ReadUntil(pipe_fds[0], grace, result.output);
    if (!ReapUntil(pid, grace, result.wait_status)) {
      kill(-pid, SIGKILL);
      waitpid(pid, &result.wait_status, 0);
    }
  }
  close(pipe_fds[0]);
  return result;
}

// run-guest-test.sh's status when the guest kernel package cannot be fetched (nothing ran).
constexpr int kKernelUnavailable = 77;

// Runs run-guest-test.sh against bexd with `options` and expects it to pass. With
// `skip_without_kernel`, a kernel package that cannot be fetched skips the test instead.
void ExpectGuestPasses(const std::vector<std::string>& options, bool skip_without_kernel) {
  if (!ExecutableInPath("qemu-system-x86_64")) {
    GTEST_SKIP() << "qemu-system-x86_64 is not installed (package qemu-system-x86)";
  }
  std::vector<std::string> argv = {kScript, "--backend", "bexd", "--bexd", BEXD_BINARY};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), {"--timeout", std::to_string(kGuestLimit.count())});
  RunResult run = RunBounded(argv, kRunLimit);
  ASSERT_FALSE(run.timed_out) << "run-guest-test.sh did not finish within " << kRunLimit.count()
                              << " s:\n"
                              << run.output;
  if (skip_without_kernel && WIFEXITED(run.wait_status) &&
      WEXITSTATUS(run.wait_status) == kKernelUnavailable) {
    GTEST_SKIP() << run.output;
  }
  ASSERT_TRUE(WIFEXITED(run.wait_status) && WEXITSTATUS(run.wait_status) == 0)
      << "run-guest-test.sh failed (wait status " << run.wait_status << "):\n"
      << run.output;
  EXPECT_NE(run.output.find("guest test: PASS"), std::string::npos) << run.output;
  std::cout << run.output;
}

// Debian 12's own kernel (6.1), one vCPU: its virtio-fs driver uses the first request queue only.
TEST(GuestTest, LinuxGuestWritesAndReadsThroughVhostUserFsExport) {
  ExpectGuestPasses({"--queues", "2"}, /*skip_without_kernel=*/false);
}

// The same guest on a qcow2 image (bexd's qcow2 node over a file node): afterwards `qemu-img check`
// finds the image clean and QEMU reads from it what the guest wrote.
TEST(GuestTest, LinuxGuestWritesAndReadsAQcow2ImageThroughVhostUserFsExport) {
  ExpectGuestPasses({"--queues", "2", "--format", "qcow2"}, /*skip_without_kernel=*/false);
}

// Linux 6.12 from the bookworm security archive maps CPUs to request queues: with 2 vCPUs and 2
// request queues, the copiers pinned to each vCPU must reach bexd on both queues (checked through
// x-query-export-stats), and the data checks hold. Skips only when that kernel cannot be fetched.
TEST(GuestTest, MultiQueueLinuxGuestUsesEveryRequestQueue) {
  ExpectGuestPasses(
      {"--kernel", "linux-image-6.12-amd64", "--cpus", "2", "--queues", "2", "--every-queue"},
      /*skip_without_kernel=*/true);
}

}  // namespace
