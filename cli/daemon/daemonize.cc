// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/daemonize.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/log.h"

namespace bexd::cli {
namespace {

constexpr std::string_view kReady = "ready";

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone; nobody is left to tell
    data.remove_prefix(n);
  }
}

[[noreturn]] void WaitForChild(int read_fd, pid_t child) {
  std::string report;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(read_fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    report.append(buffer, n);
  }
  if (report == kReady) std::exit(0);
  if (report.empty()) {
    int status = 0;
    ::waitpid(child, &status, 0);
    report = WIFSIGNALED(status) ? "the daemon was killed by signal " +
                                       std::to_string(WTERMSIG(status)) + " during start-up"
                                 : "the daemon exited during start-up without reporting why";
  }
  log::Error("{}", report);
  std::exit(1);
}

}  // namespace

StartupReport StartupReport::Daemonize() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    log::Error("--daemonize: pipe: {}", std::strerror(errno));
    std::exit(1);
  }
  util::UniqueFd read_end(fds[0]);
  util::UniqueFd write_end(fds[1]);
  pid_t child = ::fork();
  if (child < 0) {
    log::Error("--daemonize: fork: {}", std::strerror(errno));
    std::exit(1);
  }
  if (child > 0) {
    write_end.Reset();
    WaitForChild(read_end.get(), child);
  }
  read_end.Reset();
  ::setsid();
  return StartupReport(std::move(write_end));
}

void StartupReport::Succeeded() {
  if (!pipe_fd_) return;
  if (util::UniqueFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC)); null_fd) {
    ::dup2(null_fd.get(), STDIN_FILENO);
    ::dup2(null_fd.get(), STDOUT_FILENO);
    ::dup2(null_fd.get(), STDERR_FILENO);
  }
  // Keeps no directory (and so no file system) busy; every path was made absolute at parsing.
  if (::chdir("/") != 0) log::Warn("--daemonize: chdir /: {}", std::strerror(errno));
  WriteAll(pipe_fd_.get(), kReady);
  pipe_fd_.Reset();
}

void StartupReport::Failed(std::string_view message) {
  if (!pipe_fd_) {
    log::Error("{}", message);
    return;
  }
  WriteAll(pipe_fd_.get(), message);
  pipe_fd_.Reset();
}

}  // namespace bexd::cli
