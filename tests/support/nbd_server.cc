// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/nbd_server.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

extern char** environ;

namespace bexd::testing {

NbdServer::NbdServer(std::vector<std::string> command, std::string pid_file, std::string log_file,
                     std::string socket)
    : command_(std::move(command)),
      pid_file_(std::move(pid_file)),
      log_file_(std::move(log_file)),
      socket_(std::move(socket)) {}

bool NbdServer::Start() {
  if (pid_ > 0) return true;
  ::unlink(pid_file_.c_str());  // a stale one would look ready
  if (!socket_.empty()) ::unlink(socket_.c_str());
  std::vector<char*> argv;
  for (std::string& arg : command_) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_file_.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  const int error = ::posix_spawnp(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    pid_ = -1;
    why_not_ = "cannot run " + command_[0] + ": " + std::strerror(error);
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    struct stat st;
    if (::stat(pid_file_.c_str(), &st) == 0 && st.st_size > 0) return true;
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      std::ifstream log(log_file_);
      why_not_ = command_[0] + " exited before serving; its log: " +
                 std::string(std::istreambuf_iterator<char>(log), {});
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  why_not_ = command_[0] + " did not write " + pid_file_ + " within 20 s";
  Kill();
  return false;
}

void NbdServer::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  ::unlink(pid_file_.c_str());
}

void NbdServer::Signal(int signal) {
  if (pid_ > 0) ::kill(pid_, signal);
}

bool NbdServer::WaitExit(std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (pid_ > 0) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      ::unlink(pid_file_.c_str());
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool HaveProgram(const std::string& program) {
  return std::system(("command -v '" + program + "' >/dev/null 2>&1").c_str()) == 0;
}

}  // namespace bexd::testing
