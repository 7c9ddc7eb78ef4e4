// SPDX-License-Identifier: GPL-2.0-or-later
// A bexd killed with SIGKILL leaves a dead FUSE mount (answering ENOTCONN) on its mountpoint and a
// stale QMP socket and pidfile: the same command line started again clears them and serves the
// data synced before the crash. A mount of a bexd that is alive stays refused.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "tests/control/control_fixture.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

class RestartTest : public ControlTest {
 protected:
  void TearDown() override {
    ControlTest::TearDown();
    // Dead mounts a failed test may leave behind.
    while (IsMounted(mountpoint_) && ::umount2(mountpoint_.c_str(), MNT_DETACH) == 0) {
    }
  }

  // Starts bexd with the standard command line and waits until it serves (pidfile written).
  void StartAndWait() {
    StartDaemon({"--pidfile", pidfile_});
    const std::string pid = std::to_string(daemon_->pid()) + "\n";
    ASSERT_TRUE(WaitFor([&] { return ReadFile(pidfile_) == pid || !daemon_->running(); }));
    ASSERT_TRUE(daemon_->running()) << ReadFile(log_);
  }

  const std::string pidfile_ = Path("bexd.pid");
};

TEST_F(RestartTest, KilledDaemonRestartsWithTheSameCommandLineAndKeepsSyncedData) {
  StartAndWait();
  constexpr off_t kOffset = 1 << 20;
  const std::string synced = Pattern(4 << 20, 3);
  int fd = ::open(mountpoint_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, synced.data(), synced.size(), kOffset),
            static_cast<ssize_t>(synced.size()));
  ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);

  EXPECT_EQ(daemon_->Stop(SIGKILL), -1);
  // What the crash leaves: a mount without a server, and the pidfile and socket files.
  ASSERT_TRUE(IsMounted(mountpoint_));
  struct stat st;
  ASSERT_NE(::stat(mountpoint_.c_str(), &st), 0);
  ASSERT_EQ(errno, ENOTCONN);

  StartAndWait();
  EXPECT_NE(ReadFile(log_).find("bexd: warning: mountpoint '" + mountpoint_ +
                                "' holds the FUSE mount of a bexd that is gone (it answers "
                                "ENOTCONN); detaching it"),
            std::string::npos)
      << ReadFile(log_);
  std::string read_back(synced.size(), '\0');
  fd = ::open(mountpoint_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::pread(fd, read_back.data(), read_back.size(), kOffset),
            static_cast<ssize_t>(read_back.size()));
  ::close(fd);
  EXPECT_TRUE(read_back == synced);
  auto client = Connect();
  client->Negotiate();
  EXPECT_EQ(Success(client->Execute("query-block-exports")), "");
  // TearDown: SIGTERM exits 0 and nothing stays mounted, neither the new mount nor the dead one.
}

TEST_F(RestartTest, MountOfALiveBexdStaysRefused) {
  StartAndWait();
  const std::string other_image = dir_.File("other.img", 1 << 20);
  RunResult second =
      RunBexd({"--blockdev", "driver=file,node-name=disk0,filename=" + other_image, "--export",
               "type=fuse,id=exp0,node-name=disk0,writable=on,mountpoint=" + mountpoint_},
              std::chrono::seconds(60));
  EXPECT_EQ(second.exit_status, 1) << second.err;
  EXPECT_NE(second.err.find("mountpoint '" + mountpoint_ +
                            "' is already a FUSE mount (fuse.bexd); unmount it first"),
            std::string::npos)
      << second.err;
  // The first daemon still serves its image through the mount.
  struct stat st;
  ASSERT_EQ(::stat(mountpoint_.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kImageBytes);
  auto client = Connect();
  client->Negotiate();
  EXPECT_EQ(Success(client->Execute("query-block-exports")), "");
}

// The demo relies on the same mechanism: run again after kill -9, it serves the same image.
TEST_F(RestartTest, KilledDemoRestarts) {
  const std::string demo_dir = Path("demo");
  const std::string demo_mountpoint = demo_dir + "/disk";
  auto start_demo = [&] {
    daemon_ = std::make_unique<BexdDaemon>(std::vector<std::string>{"--demo-dir", demo_dir}, log_);
    const std::string pid = std::to_string(daemon_->pid()) + "\n";
    EXPECT_TRUE(
        WaitFor([&] { return ReadFile(demo_dir + "/bexd.pid") == pid || !daemon_->running(); }));
    return daemon_->running();
  };
  ASSERT_TRUE(start_demo()) << ReadFile(log_);
  EXPECT_EQ(daemon_->Stop(SIGKILL), -1);
  const bool restarted = start_demo();
  EXPECT_TRUE(restarted) << ReadFile(log_);
  if (restarted) {
    EXPECT_EQ(ReadFile(demo_mountpoint).substr(0, 15), "bexd demo image");
    EXPECT_EQ(daemon_->Stop(), 0) << ReadFile(log_);
  }
  while (IsMounted(demo_mountpoint) && ::umount2(demo_mountpoint.c_str(), MNT_DETACH) == 0) {
  }
  EXPECT_FALSE(IsMounted(demo_mountpoint));
}

}  // namespace
}  // namespace bexd::testing
