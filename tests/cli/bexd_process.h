// SPDX-License-Identifier: GPL-2.0-or-later
// Test helpers that run the real bexd binary (BEXD_BINARY): once to completion with its output
// captured, or in the background as a daemon to talk to. Every wait is bounded. Header-only so
// tests/control can share it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace bexd::testing {

struct RunResult {
  int exit_status = -1;  // -1: killed after the timeout or by a signal
  std::string out;
  std::string err;
};

// A directory of its own for each test, so parallel tests never share a mountpoint or socket.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/bexd-test-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name, size_t size = 0) const {
    std::string file = path_ + "/" + name;
    std::ofstream(file).close();
    std::filesystem::resize_file(file, size);
    return file;
  }

 private:
  std::string path_;
};

inline std::vector<char*> Argv(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(BEXD_BINARY));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  return argv;
}

// Runs bexd with `args` until it exits (killed after `timeout`) and returns its output. Reading
// stops once the process has exited, even if a daemonized child still holds the pipes.
inline RunResult RunBexd(const std::vector<std::string>& args,
                         std::chrono::seconds timeout = std::chrono::seconds(60)) {
  RunResult result;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return result;
  std::vector<char*> argv = Argv(args);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execv(BEXD_BINARY, argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  bool exited = false;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_pipes = 2;
  while (!exited || open_pipes > 0) {
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) exited = true;
    if (std::chrono::steady_clock::now() > deadline) {
      if (!exited) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        exited = true;
      }
      break;
    }
    // Once the process has exited, read what is buffered but do not wait for writers it left.
    int ready = ::poll(fds, 2, exited ? 0 : 50);
    if (ready <= 0) {
      if (exited) break;
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buffer[4096];
      ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, n);
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
      }
    }
  }
  for (pollfd& fd : fds) {
    if (fd.fd >= 0) ::close(fd.fd);
  }
  if (exited && WIFEXITED(status)) result.exit_status = WEXITSTATUS(status);
  return result;
}

inline int CountLines(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

// Whether anything is mounted on `path` now (from /proc/self/mountinfo).
inline bool IsMounted(const std::string& path) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mountinfo, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, mountpoint;
    fields >> id >> parent >> device >> root >> mountpoint;
    if (mountpoint == path) return true;
  }
  return false;
}

// Polls `condition` every 20 ms for up to `timeout`.
template <typename Condition>
bool WaitFor(Condition condition, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// bexd running in the background, its stderr going to a file. Killed if still running when the
// test ends.
class BexdDaemon {
 public:
  // stdout goes to the log too, unless `stdout_fd` is given; stdin is the test's unless
  // `stdin_fd` is given (--chardev stdio).
  explicit BexdDaemon(const std::vector<std::string>& args, const std::string& log_path,
                      int stdin_fd = -1, int stdout_fd = -1) {
    std::vector<char*> argv = Argv(args);
    pid_ = ::fork();
    if (pid_ == 0) {
      int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (stdin_fd >= 0) ::dup2(stdin_fd, STDIN_FILENO);
      ::dup2(stdout_fd >= 0 ? stdout_fd : log, STDOUT_FILENO);
      ::dup2(log, STDERR_FILENO);
      ::execv(BEXD_BINARY, argv.data());
      ::_exit(127);
    }
  }
  ~BexdDaemon() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  bool running() {
    if (exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    return !exited_;
  }
  // Sends `signal` and waits (bounded) for the exit; returns the exit status, -1 if killed.
  int Stop(int signal = SIGTERM, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    if (running()) ::kill(pid_, signal);
    return Wait(timeout);
  }
  int Wait(std::chrono::seconds timeout = std::chrono::seconds(60)) {
    if (!WaitFor([&] { return !running(); }, timeout)) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      exited_ = true;
      exit_status_ = -1;
    }
    return exit_status_;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_status_ = -1;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace bexd::testing
