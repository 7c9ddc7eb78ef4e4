// SPDX-License-Identifier: GPL-2.0-or-later
// A backing-file I/O error reaches the client with its errno and the daemon's log, and the export
// keeps serving; a failed fsync stays failed.
//
// The backing file is a FailingDisk (tests/support): an nbdfuse mount of an nbdkit memory disk
// behind the error filter, whose reads and writes fail with EIO on demand. With a loop device on
// it, a node without O_DIRECT has a page cache whose writeback fails (fsyncgate).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/daemon/daemon.h"
#include "cli/daemon/qmp_commands.h"
#include "export/flush_node.h"
#include "tests/export/export_fixture.h"
#include "tests/support/failing_disk.h"
#include "tests/support/loop_device.h"

namespace bexd::exports::testing {
namespace {

constexpr uint64_t kDiskBytes = 16 << 20;

using bexd::testing::FailingDisk;
using bexd::testing::LoopDevice;
using nlohmann::json;

using IoErrorTest = FuseExportTest;

// Writes `seed`'s pattern to [offset, offset + 4096) through `fd`.
void WriteBlock(int fd, uint64_t offset, uint32_t seed) {
  std::vector<uint8_t> data(4096);
  FillPattern(data.data(), data.size(), offset, seed);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset)), 4096)
      << std::strerror(errno);
}

// fsync's errno, or 0 on success.
int FsyncError(int fd) { return ::fsync(fd) == 0 ? 0 : errno; }

json Execute(cli::QmpCommands& qmp, const std::string& command, json arguments = json::object()) {
  bool negotiated = true;
  return qmp.Handle({{"execute", command}, {"arguments", std::move(arguments)}}, &negotiated);
}

TEST_F(IoErrorTest, BackingFileErrorReachesTheClientAsEio) {
  FailingDisk disk(scratch_.path(), kDiskBytes);
  ASSERT_TRUE(disk.ok()) << disk.why_not();
  const std::string mountpoint = MakeMountpoint();
  // No O_DIRECT on the nbdfuse file; aio=threads because libaio would block on it anyway.
  Export* running = Start(FuseOptions(mountpoint, true, 2),
                          OpenFileNode(disk.path(), false, false, block::AioMode::kThreads));
  ASSERT_NE(running, nullptr);
  int fd = ::open(mountpoint.c_str(), O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  AlignedBuffer buffer(4096);

  ::testing::internal::CaptureStderr();
  disk.SetFailing(true);
  EXPECT_EQ(::pread(fd, buffer.data, 4096, 1 << 20), -1);
  EXPECT_EQ(errno, EIO);
  FillPattern(buffer.data, 4096, 0, 1);
  EXPECT_EQ(::pwrite(fd, buffer.data, 4096, 0), -1);
  EXPECT_EQ(errno, EIO);
  // The daemon's log names each failure, not only the client's errno.
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("FUSE READ"), std::string::npos) << log;
  EXPECT_NE(log.find("failed 4096 bytes at offset 1048576: Input/output error"), std::string::npos)
      << log;
  EXPECT_NE(log.find("failed 4096 bytes at offset 0: Input/output error"), std::string::npos)
      << log;

  // The export still serves once the disk works again, on every queue.
  disk.SetFailing(false);
  for (int i = 0; i < 16; ++i) {
    FillPattern(buffer.data, 4096, i * 4096, 2);
    ASSERT_EQ(::pwrite(fd, buffer.data, 4096, i * 4096), 4096) << std::strerror(errno);
  }
  for (int i = 0; i < 16; ++i) {
    ASSERT_EQ(::pread(fd, buffer.data, 4096, i * 4096), 4096) << std::strerror(errno);
    for (int b = 0; b < 4096; ++b) ASSERT_EQ(buffer.data[b], PatternByte(i * 4096 + b, 2));
  }
  ASSERT_EQ(::pread(fd, buffer.data, 4096, 1 << 20), 4096) << std::strerror(errno);
  ::close(fd);
  uint64_t errors = 0;
  for (const auto& queue : running->Stats()) errors += queue.errors;
  EXPECT_EQ(errors, 2u);
  exports_.clear();  // closes the backing file, so that the disk can unmount
}

// A loop device over a FailingDisk: a node without O_DIRECT on it writes into the device's page
// cache, whose writeback fails while the disk fails.
class FailedWritebackTest : public FuseExportTest {
 protected:
  void SetUp() override {
    disk_.emplace(scratch_.path(), kDiskBytes);
    ASSERT_TRUE(disk_->ok()) << disk_->why_not();
    loop_.emplace(disk_->path());
    if (loop_->path().empty()) GTEST_SKIP() << "losetup is not available (needs root and loop)";
  }

  // Destroyed after TearDown() has stopped the exports, so nothing holds the loop device.
  std::optional<FailingDisk> disk_;
  std::optional<LoopDevice> loop_;  // declared last: detached before the disk goes
};

// One writer, through the daemon's own QMP commands: the fsync that meets the failed writeback
// fails, and so does every fsync after it, although the disk works again; the node's query says
// why.
TEST_F(FailedWritebackTest, FailedFsyncStaysFailedAndTheNodeSaysSo) {
  const std::string mountpoint = MakeMountpoint();
  cli::Daemon daemon({});
  cli::QmpCommands qmp(&daemon);
  // cache.direct is off by default: the node writes into the loop device's page cache.
  ASSERT_EQ(Execute(qmp, "blockdev-add",
                    {{"driver", "file"}, {"node-name", "disk0"}, {"filename", loop_->path()}}),
            json({{"return", json::object()}}));
  ASSERT_EQ(Execute(qmp, "block-export-add",
                    {{"type", "fuse"},
                     {"id", "exp0"},
                     {"node-name", "disk0"},
                     {"mountpoint", mountpoint},
                     {"writable", true}}),
            json({{"return", json::object()}}));
  const int fd = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  WriteBlock(fd, 0, 1);
  EXPECT_EQ(FsyncError(fd), 0);
  EXPECT_FALSE(Execute(qmp, "query-named-block-nodes")["return"][0].contains("flush-error"));
  WriteBlock(fd, 0, 2);

  disk_->SetFailing(true);
  EXPECT_EQ(FsyncError(fd), EIO);
  disk_->SetFailing(false);
  EXPECT_EQ(FsyncError(fd), EIO);
  WriteBlock(fd, 4096, 3);
  EXPECT_EQ(FsyncError(fd), EIO);
  const json nodes = Execute(qmp, "query-named-block-nodes")["return"];
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].value("flush-error", ""), std::string(std::strerror(EIO))) << nodes.dump();
  ::close(fd);
}

// Two writers (two open file descriptions): once the first writer's fsync has failed, the
// second writer's fsync fails too, for its own writes as well. So does the flush an export
// makes when it stops.
TEST_F(FailedWritebackTest, SecondWritersFsyncFailsAfterTheFirstOnesFailed) {
  const std::string mountpoint = MakeMountpoint();
  std::shared_ptr<block::BlockNode> node =
      OpenFileNode(loop_->path(), false, false, block::AioMode::kThreads);
  ASSERT_NE(node, nullptr);
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 2), node), nullptr);
  const int first = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(first, 0) << std::strerror(errno);
  const int second = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(second, 0) << std::strerror(errno);
  WriteBlock(first, 0, 1);
  WriteBlock(second, 65536, 1);
  EXPECT_EQ(FsyncError(first), 0);
  EXPECT_EQ(FsyncError(second), 0);
  WriteBlock(first, 0, 2);
  WriteBlock(second, 65536, 2);

  disk_->SetFailing(true);
  EXPECT_EQ(FsyncError(first), EIO);
  disk_->SetFailing(false);
  EXPECT_EQ(FsyncError(second), EIO);
  WriteBlock(second, 65536 + 4096, 3);
  EXPECT_EQ(FsyncError(second), EIO);
  EXPECT_EQ(FsyncError(first), EIO);
  EXPECT_EQ(node->flush_error(), EIO);
  ::close(first);
  ::close(second);
  // What an export's Stop() does after its last request (it logs the failure).
  absl::Status stop_flush = FlushNode(*node);
  EXPECT_EQ(stop_flush.code(), absl::StatusCode::kDataLoss) << stop_flush;
}

// A daemon whose final flush fails (the disk failed under buffered writes and stayed failed for
// the flush) says so in its exit status, so a script or service manager learns that data may be
// lost; a clean stop still exits 0.
TEST_F(FailedWritebackTest, AFailedFinalFlushMakesTheExitStatusOne) {
  for (bool fail : {false, true}) {
    SCOPED_TRACE(fail ? "failing disk" : "working disk");
    const std::string mountpoint = MakeMountpoint();
    Daemon daemon({"--blockdev", "driver=file,node-name=disk0,filename=" + loop_->path(),
                   "--export",
                   "type=fuse,id=exp0,node-name=disk0,writable=on,mountpoint=" + mountpoint});
    ASSERT_TRUE(daemon.WaitMounted(mountpoint));
    const int fd = ::open(mountpoint.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    WriteBlock(fd, 0, fail ? 5 : 4);
    disk_->SetFailing(fail);
    // The file system flushes (and fails) the write at the close; the export's own flush at the
    // stop fails again, as the node keeps its flush error.
    ::close(fd);
    const int status = daemon.SignalAndWait(SIGTERM);
    disk_->SetFailing(false);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), fail ? 1 : 0);
  }
}

}  // namespace
}  // namespace bexd::exports::testing
