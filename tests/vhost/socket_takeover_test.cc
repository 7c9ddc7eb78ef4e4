// SPDX-License-Identifier: GPL-2.0-or-later
// The real bexd and the socket of a vhost-user-fs export: a second daemon (or a monitor of the
// same daemon) never takes over a socket a server answers on, a stale one is replaced, a file of
// another kind is left intact, and stopping removes only the socket the daemon itself bound.
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/bexd_process.h"
#include "tests/support/unix_sockets.h"
#include "tests/vhost/export_fixture.h"
#include "util/unique_fd.h"

namespace bexd::test::vhost {
namespace {

using bexd::testing::BexdDaemon;
using bexd::testing::InodeAt;
using bexd::testing::LeaveStaleSocket;
using bexd::testing::ListenOnPath;
using bexd::testing::ReadFile;
using bexd::testing::RunBexd;
using bexd::testing::RunResult;
using bexd::testing::WaitFor;

class SocketTakeoverTest : public VhostExportTest {
 protected:
  void SetUp() override {
    VhostExportTest::SetUp();
    monitor_ = dir_ + "/qmp.sock";
    pidfile_ = dir_ + "/bexd.pid";
    log_ = dir_ + "/bexd.log";
  }

  void TearDown() override {
    daemon_.reset();  // kills it if a test failed before stopping it
    VhostExportTest::TearDown();
  }

  static std::string ExportArg(const std::string& socket) {
    return "type=vhost-user-fs,id=vfs0,node-name=disk0,addr.type=unix,addr.path=" + socket +
           ",tag=images,writable=on";
  }

  // Starts bexd serving image_ on socket_, with a monitor on monitor_; waits until it serves.
  void StartDaemon() {
    daemon_ = std::make_unique<BexdDaemon>(
        std::vector<std::string>{"--blockdev", "driver=file,node-name=disk0,filename=" + image_,
                                 "--export", ExportArg(socket_), "--monitor", "path=" + monitor_,
                                 "--pidfile", pidfile_},
        log_);
    const std::string pid = std::to_string(daemon_->pid()) + "\n";
    ASSERT_TRUE(WaitFor([&] { return ReadFile(pidfile_) == pid || !daemon_->running(); }));
    ASSERT_TRUE(daemon_->running()) << ReadFile(log_);
  }

  // A frontend reads the start of the image through socket_ and gets image_'s bytes.
  void ExpectServesTheImage() {
    std::unique_ptr<Frontend> frontend = ConnectAndInit(Options());
    ASSERT_NE(frontend, nullptr);
    const uint64_t node = LookupImage(*frontend);
    struct fuse_read_in in = {};
    in.fh = OpenImage(*frontend, node);
    in.size = 8192;
    absl::StatusOr<FuseReply> reply =
        frontend->Fuse(1, FUSE_READ, node, &in, sizeof(in), nullptr, 0, 16 + 8192);
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->header.error, 0);
    ASSERT_EQ(reply->payload.size(), 8192u);
    EXPECT_TRUE(std::equal(reply->payload.begin(), reply->payload.end(), pattern_.begin()));
  }

  // Runs a second bexd (own image, own monitor) and returns its result; a second daemon that
  // took the socket over would keep running, so the wait is bounded.
  RunResult RunSecondDaemon(const std::vector<std::string>& extra) {
    const std::string other_image = dir_ + "/other.img";
    std::ofstream(other_image).close();
    std::filesystem::resize_file(other_image, kImageSize);
    std::vector<std::string> args = {"--blockdev",
                                     "driver=file,node-name=disk0,filename=" + other_image};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunBexd(args, std::chrono::seconds(30));
  }

  std::string monitor_, pidfile_, log_;
  std::unique_ptr<BexdDaemon> daemon_;
};

TEST_F(SocketTakeoverTest, SecondDaemonOnALiveExportSocketIsRefusedAndTheFirstStillServes) {
  StartDaemon();
  const ino_t inode = InodeAt(socket_);
  RunResult second = RunSecondDaemon({"--export", ExportArg(socket_)});
  EXPECT_EQ(second.exit_status, 1) << second.err;
  EXPECT_EQ(second.err, "bexd: error: export 'vfs0': socket '" + socket_ +
                            "': a server is listening on it (another bexd, or another export or "
                            "monitor); stop it or choose another path\n");
  EXPECT_EQ(InodeAt(socket_), inode);
  ExpectServesTheImage();
  EXPECT_EQ(daemon_->Stop(), 0) << ReadFile(log_);
  EXPECT_NE(::access(socket_.c_str(), F_OK), 0);
}

TEST_F(SocketTakeoverTest, StaleSocketsAreReplaced) {
  LeaveStaleSocket(socket_);
  LeaveStaleSocket(monitor_);
  StartDaemon();
  ExpectServesTheImage();
  EXPECT_EQ(daemon_->Stop(), 0) << ReadFile(log_);
  EXPECT_NE(::access(socket_.c_str(), F_OK), 0);
  EXPECT_NE(::access(monitor_.c_str(), F_OK), 0);
}

TEST_F(SocketTakeoverTest, RegularFileAtTheSocketPathIsRefusedAndKept) {
  std::ofstream(socket_) << "not a socket\n";
  RunResult result = RunSecondDaemon({"--export", ExportArg(socket_)});
  EXPECT_EQ(result.exit_status, 1) << result.err;
  EXPECT_EQ(result.err, "bexd: error: export 'vfs0': socket '" + socket_ +
                            "': the path exists and is not a socket\n");
  EXPECT_EQ(ReadFile(socket_), "not a socket\n");
}

// Another process removed the daemon's socket files and listens at both paths now: stopping the
// daemon must leave them to it.
TEST_F(SocketTakeoverTest, StopLeavesSocketsThatReplacedTheDaemonsOwn) {
  StartDaemon();
  ASSERT_EQ(::unlink(socket_.c_str()), 0);
  ASSERT_EQ(::unlink(monitor_.c_str()), 0);
  util::UniqueFd export_replacement = ListenOnPath(socket_);
  util::UniqueFd monitor_replacement = ListenOnPath(monitor_);
  const ino_t export_inode = InodeAt(socket_);
  const ino_t monitor_inode = InodeAt(monitor_);
  EXPECT_EQ(daemon_->Stop(), 0) << ReadFile(log_);
  EXPECT_EQ(InodeAt(socket_), export_inode);
  EXPECT_EQ(InodeAt(monitor_), monitor_inode);
}

// Within one daemon, a monitor and an export on one path would leave QMP unreachable.
TEST_F(SocketTakeoverTest, ExportOnTheMonitorPathIsRefused) {
  RunResult result =
      RunSecondDaemon({"--export", ExportArg(socket_), "--monitor", "path=" + socket_});
  EXPECT_EQ(result.exit_status, 1) << result.err;
  EXPECT_EQ(result.err,
            "bexd: error: export 'vfs0': '" + socket_ + "' is already used by a QMP monitor\n");
  EXPECT_NE(::access(socket_.c_str(), F_OK), 0);
}

TEST_F(SocketTakeoverTest, TwoMonitorsOnOnePathAreRefused) {
  RunResult result = RunSecondDaemon(
      {"--monitor", "path=" + monitor_, "--monitor", "path=" + dir_ + "/./qmp.sock"});
  EXPECT_EQ(result.exit_status, 1) << result.err;
  EXPECT_EQ(result.err,
            "bexd: error: monitor socket '" + monitor_ + "' is already used by another monitor\n");
  EXPECT_NE(::access(monitor_.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace bexd::test::vhost
