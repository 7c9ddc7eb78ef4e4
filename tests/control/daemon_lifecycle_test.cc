// SPDX-License-Identifier: GPL-2.0-or-later
// The daemon's life cycle: quit, signals under load, --pidfile, --daemonize, sd_notify and a
// config file with a monitor.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/control/control_fixture.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

TEST_F(ControlTest, QuitStopsEverythingAndCleansUp) {
  std::string pidfile = Path("bexd.pid");
  StartDaemon({"--pidfile", pidfile});
  EXPECT_TRUE(WaitForPidfile(pidfile));
  auto client = Connect();
  client->Negotiate();
  EXPECT_EQ(client->Execute("quit"), json({{"return", json::object()}}));
  EXPECT_EQ(daemon_->Wait(), 0) << ReadFile(log_);
  EXPECT_FALSE(IsMounted(mountpoint_));
  EXPECT_FALSE(std::filesystem::exists(socket_));
  EXPECT_FALSE(std::filesystem::exists(pidfile));
}

// Commands that came in the same read as a quit run no more: an export added there was mounted
// after SHUTDOWN and stopped without its event, and a second quit sent SHUTDOWN twice.
TEST_F(ControlTest, NothingRunsAfterQuit) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  const std::string late = Path("late.mnt");
  ::close(::open(late.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  client->SendRaw(
      json({{"execute", "quit"}}).dump() + "\n" +
      json({{"execute", "block-export-add"}, {"arguments", FuseExport("late", "disk0", late)}})
          .dump() +
      "\n" + json({{"execute", "quit"}}).dump() + "\n");
  EXPECT_EQ(client->ReadReply(), json({{"return", json::object()}}));
  EXPECT_EQ(daemon_->Wait(), 0) << ReadFile(log_);
  EXPECT_TRUE(client->WaitEvent("SHUTDOWN").has_value());
  EXPECT_FALSE(client->WaitEvent("SHUTDOWN", std::chrono::seconds(1)).has_value());
  const json after = client->ReadReply();
  EXPECT_TRUE(after.is_null()) << "a reply after quit: " << after;
  EXPECT_EQ(ReadFile(log_).find("'late'"), std::string::npos) << ReadFile(log_);
  EXPECT_FALSE(IsMounted(late));
}

TEST_F(ControlTest, EveryStopSignalShutsDownCleanly) {
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
    StartDaemon();
    EXPECT_EQ(daemon_->Stop(signal), 0) << strsignal(signal) << ReadFile(log_);
    EXPECT_FALSE(IsMounted(mountpoint_)) << strsignal(signal);
    EXPECT_FALSE(std::filesystem::exists(socket_));
  }
}

TEST_F(ControlTest, SigtermUnderLoadKeepsSyncedData) {
  StartDaemon();
  constexpr size_t kSynced = 4 << 20;
  std::string synced = Pattern(kSynced, 1);
  int fd = ::open(mountpoint_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, synced.data(), synced.size(), 0), static_cast<ssize_t>(synced.size()));
  ASSERT_EQ(::fsync(fd), 0);
  // Keep writing elsewhere while the daemon is told to stop; those writes may fail once the
  // export is gone, but must not hang or touch the synced range.
  std::atomic<bool> stop_writing = false;
  std::thread writer([&] {
    std::string data = Pattern(64 * 1024, 2);
    for (uint64_t offset = kSynced; !stop_writing;
         offset = kSynced + (offset + data.size()) % (8 << 20)) {
      if (::pwrite(fd, data.data(), data.size(), offset) < 0) break;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(daemon_->Stop(SIGTERM), 0) << ReadFile(log_);
  stop_writing = true;
  writer.join();
  ::close(fd);
  EXPECT_FALSE(IsMounted(mountpoint_));
  EXPECT_TRUE(ReadFile(image_).substr(0, kSynced) == synced);
}

TEST_F(ControlTest, PidfileIsLockedWhileRunning) {
  std::string pidfile = Path("bexd.pid");
  StartDaemon({"--pidfile", pidfile});
  ASSERT_TRUE(WaitForPidfile(pidfile));
  std::string second_mountpoint = dir_.File("mnt2");
  RunResult second =
      RunBexd({"--blockdev", "null-co,node-name=n", "--export",
               "fuse,id=e,node-name=n,mountpoint=" + second_mountpoint, "--pidfile", pidfile});
  EXPECT_EQ(second.exit_status, 1);
  EXPECT_EQ(second.err, "bexd: error: --pidfile '" + pidfile +
                            "' is locked by a running bexd (pid " + std::to_string(daemon_->pid()) +
                            ")\n");
  EXPECT_FALSE(IsMounted(second_mountpoint));
  EXPECT_EQ(ReadFile(pidfile), std::to_string(daemon_->pid()) + "\n");
  EXPECT_EQ(daemon_->Stop(), 0);
  EXPECT_FALSE(std::filesystem::exists(pidfile));
}

TEST_F(ControlTest, StalePidfileIsTakenOver) {
  std::string pidfile = Path("bexd.pid");
  std::ofstream(pidfile) << "999999\n";
  StartDaemon({"--pidfile", pidfile});
  EXPECT_TRUE(WaitForPidfile(pidfile));
}

TEST_F(ControlTest, DaemonizeReturnsOnceServing) {
  std::string pidfile = Path("bexd.pid");
  RunResult parent =
      RunBexd({"--blockdev", "driver=file,node-name=disk0,filename=" + image_, "--export",
               "type=fuse,id=exp0,node-name=disk0,writable=on,mountpoint=" + mountpoint_,
               "--monitor", "path=" + socket_, "--pidfile", pidfile, "--daemonize"});
  EXPECT_EQ(parent.exit_status, 0) << parent.err;
  EXPECT_EQ(parent.err, "");
  // Already serving when the parent returned.
  EXPECT_TRUE(IsMounted(mountpoint_));
  pid_t pid = std::stoi(ReadFile(pidfile));
  EXPECT_EQ(::kill(pid, 0), 0);
  QmpClient client(socket_);
  ASSERT_TRUE(client.connected());
  client.Negotiate();
  EXPECT_EQ(client.Execute("query-block-exports")["return"].size(), 1u);
  EXPECT_EQ(client.Execute("quit"), json({{"return", json::object()}}));
  EXPECT_TRUE(WaitFor([&] { return ::kill(pid, 0) != 0; }));
  EXPECT_FALSE(IsMounted(mountpoint_));
  EXPECT_FALSE(std::filesystem::exists(pidfile));
}

TEST_F(ControlTest, DaemonizeReportsStartupFailureThroughTheParent) {
  std::string pidfile = Path("bexd.pid");
  StartDaemon({"--pidfile", pidfile});
  ASSERT_TRUE(WaitForPidfile(pidfile));
  // Fails in the child, after the fork: the pidfile is held by the daemon above.
  std::string second_mountpoint = dir_.File("mnt2");
  RunResult parent = RunBexd({"--blockdev", "null-co,node-name=n", "--export",
                              "fuse,id=e,node-name=n,mountpoint=" + second_mountpoint, "--pidfile",
                              pidfile, "--daemonize"});
  EXPECT_EQ(parent.exit_status, 1);
  EXPECT_EQ(parent.err, "bexd: error: --pidfile '" + pidfile +
                            "' is locked by a running bexd (pid " + std::to_string(daemon_->pid()) +
                            ")\n");
  EXPECT_FALSE(IsMounted(second_mountpoint));
  // Fails in the child while opening the node.
  parent =
      RunBexd({"--blockdev", "driver=file,node-name=d,filename=" + Path("missing.img"), "--export",
               "fuse,id=e,node-name=d,mountpoint=" + second_mountpoint, "--daemonize"});
  EXPECT_EQ(parent.exit_status, 1);
  EXPECT_EQ(CountLines(parent.err), 1) << parent.err;
  EXPECT_NE(parent.err.find("missing.img"), std::string::npos) << parent.err;
}

TEST_F(ControlTest, NotifiesTheServiceManagerWhenReady) {
  std::string notify_path = Path("notify.sock");
  int notify = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, notify_path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(notify, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ::setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
  StartDaemon();
  ::unsetenv("NOTIFY_SOCKET");
  auto receive = [&] {
    pollfd pfd = {notify, POLLIN, 0};
    if (::poll(&pfd, 1, 20000) != 1) return std::string("(timeout)");
    char buffer[256];
    ssize_t n = ::recv(notify, buffer, sizeof(buffer), 0);
    return std::string(buffer, n > 0 ? n : 0);
  };
  EXPECT_EQ(receive(), "READY=1");
  EXPECT_EQ(daemon_->Stop(), 0);
  EXPECT_EQ(receive(), "STOPPING=1");
  ::close(notify);
}

TEST_F(ControlTest, ConfigFileWithMonitor) {
  std::string config = Path("bexd.json");
  std::string second_mountpoint = dir_.File("mnt2");
  std::ofstream(config)
      << json({{"object", {{{"qom-type", "iothread"}, {"id", "t0"}}}},
               {"blockdev", {{{"driver", "null-co"}, {"node-name", "n0"}, {"size", 1 << 20}}}},
               {"export",
                {{{"type", "fuse"},
                  {"id", "e0"},
                  {"node-name", "n0"},
                  {"mountpoint", second_mountpoint},
                  {"iothread", "t0"}}}},
               {"monitor", {{"path", Path("config.sock")}}}})
             .dump(2);
  StartDaemon({"--config", config});
  QmpClient client(Path("config.sock"));
  ASSERT_TRUE(client.connected());
  client.Negotiate();
  json exports = client.Execute("query-block-exports")["return"];
  ASSERT_EQ(exports.size(), 2u);
  // Newest first, as QEMU lists them: the config file's export came after the command line's.
  EXPECT_EQ(exports[0]["id"], "e0");
  EXPECT_EQ(exports[1]["id"], "exp0");
  EXPECT_TRUE(IsMounted(second_mountpoint));
  EXPECT_EQ(daemon_->Stop(), 0);
  EXPECT_FALSE(IsMounted(second_mountpoint));
}

}  // namespace
}  // namespace bexd::testing
