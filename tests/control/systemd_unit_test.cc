// SPDX-License-Identifier: GPL-2.0-or-later
// docs/bexd.service recovers from kill -9. systemd cannot run as PID 1 here, so the test reads the
// unit and does what systemd does with it: it checks the settings (systemd-analyze verify, a
// Restart= that restarts after SIGKILL, a runtime directory kept across restarts), creates the
// runtime directory, runs ExecStartPre= (a "-" prefix ignores failure) and ExecStart= with
// $NOTIFY_SOCKET and waits for READY=1, as Type=notify does; then kill -9, the same start again,
// and the stop KillMode=mixed sends (SIGTERM to the main process). The unit's absolute paths are
// moved under a scratch directory: /run/bexd, /var/lib/bexd, and the bexd binary.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <absl/strings/str_replace.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/bexd_process.h"
#include "tests/control/control_fixture.h"
#include "tests/control/qmp_client.h"
#include "tests/support/scratch_dir.h"

namespace bexd::testing {
namespace {

// The [Service] settings of a unit file, every value of each key in order.
std::multimap<std::string, std::string> ServiceSettings(const std::string& unit_text) {
  std::multimap<std::string, std::string> settings;
  std::string section;
  std::string logical;
  std::istringstream lines(unit_text);
  for (std::string text; std::getline(lines, text);) {
    std::string_view line = text;
    if (logical.empty() && (line.starts_with('#') || line.starts_with(';'))) continue;
    if (line.ends_with('\\')) {  // continued on the next line
      line.remove_suffix(1);
      logical += std::string(line) + " ";
      continue;
    }
    logical += line;
    if (logical.starts_with('[')) {
      section = logical;
    } else if (section == "[Service]" && logical.find('=') != std::string::npos) {
      const size_t equals = logical.find('=');
      settings.emplace(logical.substr(0, equals), logical.substr(equals + 1));
    }
    logical.clear();
  }
  return settings;
}

std::string Only(const std::multimap<std::string, std::string>& settings, const std::string& key) {
  EXPECT_EQ(settings.count(key), 1u) << key;
  auto it = settings.find(key);
  return it == settings.end() ? "" : it->second;
}

struct Command {
  bool ignore_failure = false;  // the "-" prefix
  std::vector<std::string> argv;
};

class SystemdUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unit_ = ReadFile(std::string(BEXD_SOURCE_DIR) + "/docs/bexd.service");
    ASSERT_FALSE(unit_.empty());
    settings_ = ServiceSettings(unit_);
    const std::string root = scratch_.path();
    std::filesystem::create_directories(root + "/var/lib/bexd");
    std::filesystem::create_directories(root + "/run");
    image_ = scratch_.CreateFile("var/lib/bexd/disk0.img", kImageBytes);
    mountpoint_ = root + "/run/bexd/disk0";
    monitor_ = root + "/run/bexd/qmp.sock";
    log_ = root + "/bexd.log";
    notify_socket_ = root + "/notify";
    notify_fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, notify_socket_.data(), notify_socket_.size());
    ASSERT_EQ(::bind(notify_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  }

  void TearDown() override {
    if (main_pid_ > 0) {
      ::kill(main_pid_, SIGKILL);
      ::waitpid(main_pid_, nullptr, 0);
    }
    // Mounts a failed test may leave behind.
    while (IsMounted(mountpoint_) && ::umount2(mountpoint_.c_str(), MNT_DETACH) == 0) {
    }
    ::close(notify_fd_);
  }

  // A command line of the unit with its paths moved under the scratch directory.
  Command Parse(std::string_view value) {
    Command command;
    while (!value.empty() && std::string_view("-@:+!").find(value.front()) != std::string::npos) {
      if (value.front() == '-') command.ignore_failure = true;
      value.remove_prefix(1);
    }
    EXPECT_EQ(value.find_first_of("\"'$%"), std::string_view::npos)
        << "quoting and specifiers are not emulated: " << value;
    const std::string root = scratch_.path();
    const std::string run = root + "/run/bexd", lib = root + "/var/lib/bexd";
    const std::string moved = absl::StrReplaceAll(
        std::string(value),
        {{"/usr/local/bin/bexd", BEXD_BINARY}, {"/run/bexd", run}, {"/var/lib/bexd", lib}});
    std::istringstream words(moved);
    for (std::string word; words >> word;) command.argv.push_back(word);
    return command;
  }

  // Forks and executes `command` with NOTIFY_SOCKET set and output going to log_.
  pid_t Spawn(const Command& command) {
    std::vector<char*> argv;
    for (const std::string& arg : command.argv) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      int log = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(log, STDOUT_FILENO);
      ::dup2(log, STDERR_FILENO);
      ::setenv("NOTIFY_SOCKET", notify_socket_.c_str(), 1);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    return pid;
  }

  // What systemd does to start the unit; returns once bexd sent READY=1.
  void Start() {
    std::filesystem::create_directories(scratch_.path() + "/run/" +
                                        Only(settings_, "RuntimeDirectory"));
    for (auto [it, end] = settings_.equal_range("ExecStartPre"); it != end; ++it) {
      Command command = Parse(it->second);
      int status = 0;
      ::waitpid(Spawn(command), &status, 0);
      const bool succeeded = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      ASSERT_TRUE(succeeded || command.ignore_failure)
          << "ExecStartPre=" << it->second << " failed: " << ReadFile(log_);
    }
    Command command = Parse(Only(settings_, "ExecStart"));
    ASSERT_EQ(command.argv.front(), BEXD_BINARY);
    main_pid_ = Spawn(command);
    std::string state;
    ASSERT_TRUE(WaitFor(
        [&] {
          char buffer[256];
          ssize_t n = ::recv(notify_fd_, buffer, sizeof(buffer), 0);
          if (n > 0) state.assign(buffer, n);
          siginfo_t exited{};
          return state == "READY=1" ||
                 (::waitid(P_PID, main_pid_, &exited, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                  exited.si_pid == main_pid_);
        },
        std::chrono::seconds(60)))
        << ReadFile(log_);
    ASSERT_EQ(state, "READY=1") << ReadFile(log_);
  }

  // SIGKILL to bexd, as an OOM kill or `kill -9` does; returns the wait status.
  int Kill() {
    ::kill(main_pid_, SIGKILL);
    int status = 0;
    ::waitpid(main_pid_, &status, 0);
    main_pid_ = -1;
    return status;
  }

  static constexpr uint64_t kImageBytes = 16 << 20;
  ScratchDir scratch_{"systemd-unit"};
  std::string unit_;
  std::multimap<std::string, std::string> settings_;
  std::string image_, mountpoint_, monitor_, log_, notify_socket_;
  int notify_fd_ = -1;
  pid_t main_pid_ = -1;
};

TEST_F(SystemdUnitTest, SettingsRestartAfterKill9) {
  // systemd's own check of the unit, with ExecStart= naming a binary that exists here.
  const std::string copy = scratch_.path() + "/bexd.service";
  std::ofstream(copy) << absl::StrReplaceAll(unit_, {{"/usr/local/bin/bexd", BEXD_BINARY}});
  RunResult verify;
  {
    std::string command = "systemd-analyze verify " + copy + " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) verify.out.append(buffer, n);
    verify.exit_status = WEXITSTATUS(::pclose(pipe));
  }
  EXPECT_EQ(verify.exit_status, 0) << verify.out;
  EXPECT_EQ(verify.out, "");

  EXPECT_EQ(Only(settings_, "Type"), "notify");
  // The Restart= values under which systemd restarts a service killed by SIGKILL.
  const std::string restart = Only(settings_, "Restart");
  EXPECT_TRUE(restart == "on-failure" || restart == "on-abnormal" || restart == "on-abort" ||
              restart == "always")
      << restart;
  // Otherwise systemd removes the runtime directory between the runs, which is not emulated.
  const std::string preserve = Only(settings_, "RuntimeDirectoryPreserve");
  EXPECT_TRUE(preserve == "restart" || preserve == "yes") << preserve;
  EXPECT_EQ(Only(settings_, "KillMode"), "mixed");
}

TEST_F(SystemdUnitTest, RestartsAfterKill9AndServesTheSyncedData) {
  Start();
  if (HasFatalFailure()) return;
  const std::string synced = Pattern(2 << 20, 5);
  int fd = ::open(mountpoint_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, synced.data(), synced.size(), 4096), static_cast<ssize_t>(synced.size()));
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);

  const int status = Kill();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  Start();  // Restart=on-failure: the same ExecStartPre= and ExecStart= again
  if (HasFatalFailure()) return;

  std::string read_back(synced.size(), '\0');
  fd = ::open(mountpoint_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::pread(fd, read_back.data(), read_back.size(), 4096),
            static_cast<ssize_t>(read_back.size()));
  ::close(fd);
  EXPECT_TRUE(read_back == synced);
  QmpClient client(monitor_);
  ASSERT_TRUE(client.connected());
  client.Negotiate();
  EXPECT_TRUE(client.Execute("query-block-exports").contains("return"));

  // systemctl stop with KillMode=mixed: SIGTERM to the main process.
  ::kill(main_pid_, SIGTERM);
  int stop_status = 0;
  ASSERT_TRUE(WaitFor([&] { return ::waitpid(main_pid_, &stop_status, WNOHANG) == main_pid_; },
                      std::chrono::seconds(60)));
  main_pid_ = -1;
  EXPECT_TRUE(WIFEXITED(stop_status) && WEXITSTATUS(stop_status) == 0) << ReadFile(log_);
  EXPECT_FALSE(IsMounted(mountpoint_));
}

}  // namespace
}  // namespace bexd::testing
