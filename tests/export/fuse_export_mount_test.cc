// SPDX-License-Identifier: GPL-2.0-or-later
// Mounting, unmounting and refusing bad mountpoints.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "export/fuse_dev/fuse_export.h"
#include "export/start.h"
#include "tests/export/export_fixture.h"

namespace bexd::exports::testing {
namespace {

using MountTest = FuseExportTest;

TEST_F(MountTest, MountShowsTheNodeAndStopShowsTheFileAgain) {
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(FuseOptions(mountpoint, /*writable=*/false), OpenNullNode(64 << 20));
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->type(), "fuse");
  EXPECT_TRUE(IsFuseMounted(mountpoint));

  struct stat st;
  ASSERT_EQ(::stat(mountpoint.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_size, 64 << 20);

  running->Stop();
  running->Stop();  // idempotent
  EXPECT_FALSE(IsFuseMounted(mountpoint));
  EXPECT_EQ(FileSize(mountpoint), sizeof(kOriginalContent) - 1);
}

}  // namespace
}  // namespace bexd::exports::testing

namespace bexd::exports::testing {
namespace {

TEST_F(MountTest, SecondExportOnTheSameMountpointIsRefused) {
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, false), OpenNullNode(1 << 20)), nullptr);

  ExportOptions second = FuseOptions(mountpoint, false);
  second.id = "export1";
  absl::StatusOr<std::unique_ptr<Export>> refused = StartExport(second, OpenNullNode(1 << 20));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("export1"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find(mountpoint), std::string::npos) << refused.status();
  // The first export is untouched.
  EXPECT_TRUE(IsFuseMounted(mountpoint));
  EXPECT_EQ(FileSize(mountpoint), uint64_t{1} << 20);
}

TEST_F(MountTest, MountpointAlreadyMountedByAnotherProcessIsRefused) {
  const std::string mountpoint = MakeMountpoint();
  Daemon daemon({"--blockdev", "driver=null-co,node-name=other,size=1M", "--export",
                 "type=fuse,id=other,node-name=other,mountpoint=" + mountpoint});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));

  absl::StatusOr<std::unique_ptr<Export>> refused =
      StartExport(FuseOptions(mountpoint, false), OpenNullNode(1 << 20));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("already a FUSE mount"), std::string::npos)
      << refused.status();
  const int status = daemon.SignalAndWait(SIGTERM);
  EXPECT_TRUE(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(IsFuseMounted(mountpoint));
}

// An outside umount ends the connection: the queues notice, the export cleans up by itself and
// releases the mountpoint, and a later Stop() has nothing left to do.
TEST_F(MountTest, OutsideUnmountEndsTheExport) {
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(FuseOptions(mountpoint, true, 2), OpenNullNode(1 << 20));
  ASSERT_NE(running, nullptr);
  ASSERT_EQ(::umount2(mountpoint.c_str(), 0), 0) << std::strerror(errno);

  // The mountpoint is free again once the export has torn itself down (bounded wait).
  absl::StatusOr<std::unique_ptr<Export>> again;
  for (int i = 0; i < 1000; ++i) {
    ExportOptions options = FuseOptions(mountpoint, false);
    options.id = "export1";
    again = StartExport(options, OpenNullNode(2 << 20));
    if (again.ok()) break;
    ::usleep(10000);
  }
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(FileSize(mountpoint), uint64_t{2} << 20);
  running->Stop();  // the first export: nothing left to do, and the second mount is untouched
  EXPECT_TRUE(IsFuseMounted(mountpoint));
  (*again)->Stop();
  EXPECT_FALSE(IsFuseMounted(mountpoint));
  EXPECT_EQ(FileSize(mountpoint), sizeof(kOriginalContent) - 1);
}

// The owner learns of the end through the ended callback: once, after the export released the
// mountpoint, with the reason; never for an export that Stop() ended.
TEST_F(MountTest, OnlyAnExportThatEndsOnItsOwnReportsItOnce) {
  const std::string unmounted = MakeMountpoint("unmounted");
  std::atomic<int> unmounted_reports{0};
  Export* ending = Start(FuseOptions(unmounted, true, 3), OpenNullNode(1 << 20),
                         [&] { unmounted_reports.fetch_add(1); });
  ASSERT_NE(ending, nullptr);
  const std::string stopped = MakeMountpoint("stopped");
  std::atomic<int> stopped_reports{0};
  ExportOptions stopped_options = FuseOptions(stopped, true);
  stopped_options.id = "export1";
  Export* stopping =
      Start(stopped_options, OpenNullNode(1 << 20), [&] { stopped_reports.fetch_add(1); });
  ASSERT_NE(stopping, nullptr);
  EXPECT_FALSE(ending->ended());

  ASSERT_EQ(::umount2(unmounted.c_str(), 0), 0) << std::strerror(errno);
  for (int i = 0; i < 2000 && unmounted_reports.load() == 0; ++i) ::usleep(10000);
  ASSERT_EQ(unmounted_reports.load(), 1);
  EXPECT_TRUE(ending->ended());
  EXPECT_EQ(ending->ended_reason(),
            "'" + std::filesystem::canonical(unmounted).string() + "' was unmounted from outside");
  ending->Stop();
  // The report came after the mountpoint was released: it takes a new export at once.
  ExportOptions again = FuseOptions(unmounted, false);
  again.id = "export2";
  EXPECT_NE(Start(again, OpenNullNode(2 << 20)), nullptr);

  stopping->Stop();
  EXPECT_FALSE(stopping->ended());
  EXPECT_EQ(stopped_reports.load(), 0);
  EXPECT_EQ(unmounted_reports.load(), 1);
}

TEST_F(MountTest, MountpointThatIsNotARegularFileIsRefused) {
  const std::string directory = scratch_.path() + "/dir";
  ASSERT_EQ(::mkdir(directory.c_str(), 0755), 0);
  absl::StatusOr<std::unique_ptr<Export>> refused =
      StartExport(FuseOptions(directory, false), OpenNullNode(1 << 20));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("is not a regular file"), std::string::npos)
      << refused.status();

  refused = StartExport(FuseOptions(scratch_.path() + "/missing", false), OpenNullNode(1 << 20));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("No such file or directory"), std::string::npos)
      << refused.status();
  EXPECT_FALSE(IsFuseMounted(directory));
}

TEST_F(MountTest, TooManyQueuesAreRefused) {
  const std::string mountpoint = MakeMountpoint();
  absl::StatusOr<std::unique_ptr<Export>> refused = StartExport(
      FuseOptions(mountpoint, false, FuseExport::kMaxQueues + 1), OpenNullNode(1 << 20));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(IsFuseMounted(mountpoint));
}

TEST_F(MountTest, WritableExportOfReadOnlyNodeIsRefused) {
  const std::string image = scratch_.CreateFile("image", 1 << 20);
  const std::string mountpoint = MakeMountpoint();
  absl::StatusOr<std::unique_ptr<Export>> refused =
      StartExport(FuseOptions(mountpoint, /*writable=*/true), OpenFileNode(image, true));
  ASSERT_FALSE(refused.ok());
  EXPECT_FALSE(IsFuseMounted(mountpoint));
  // The mountpoint's claim was released: a correct export may use it now.
  EXPECT_NE(Start(FuseOptions(mountpoint, false), OpenFileNode(image, true)), nullptr);
}

TEST_F(MountTest, ZeroQueuesMeansOnePerCpu) {
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(FuseOptions(mountpoint, false, /*num_queues=*/0), OpenNullNode(1 << 20));
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->Stats().size(), ExpectedFuseQueues(DefaultFuseQueueCount()));
}

TEST_F(MountTest, ReadOnlyExportRefusesWrites) {
  const std::string image = scratch_.CreateFile("image", 1 << 20);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, /*writable=*/false), OpenFileNode(image)), nullptr);

  errno = 0;
  EXPECT_LT(::open(mountpoint.c_str(), O_RDWR), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_LT(::open(mountpoint.c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(::truncate(mountpoint.c_str(), 4096), 0);
  EXPECT_EQ(errno, EROFS);

  int fd = ::open(mountpoint.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  char byte = 1;
  EXPECT_EQ(::pread(fd, &byte, 1, 4096), 1);
  EXPECT_EQ(byte, 0);
  EXPECT_LT(::pwrite(fd, &byte, 1, 0), 0);
  EXPECT_EQ(errno, EBADF);  // the descriptor is read-only; the kernel refuses before FUSE
  ::close(fd);
  EXPECT_EQ(FileSize(image), uint64_t{1} << 20);
}

TEST_F(MountTest, InUseWhileAFileIsOpenAndStatsCountRequests) {
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(FuseOptions(mountpoint, true, 2), OpenNullNode(8 << 20));
  ASSERT_NE(running, nullptr);
  EXPECT_FALSE(running->in_use());

  int fd = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_TRUE(running->in_use());
  char data[4096] = {};
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(::pwrite(fd, data, sizeof(data), i * 4096), 4096);
    ASSERT_EQ(::pread(fd, data, sizeof(data), i * 4096), 4096);
  }
  ::close(fd);
  // RELEASE is asynchronous: the kernel sends it after close() returns.
  for (int i = 0; i < 500 && running->in_use(); ++i) ::usleep(10000);
  EXPECT_FALSE(running->in_use());

  std::vector<fuse::QueueStatsSnapshot> stats = running->Stats();
  ASSERT_EQ(stats.size(), ExpectedFuseQueues(2));
  uint64_t reads = 0, writes = 0, written = 0;
  for (const auto& queue : stats) {
    reads += queue.read_requests;
    writes += queue.write_requests;
    written += queue.bytes_written;
    EXPECT_EQ(queue.in_flight, 0u);
  }
  EXPECT_EQ(reads, 8u);
  EXPECT_EQ(writes, 8u);
  EXPECT_EQ(written, 8u * 4096);
}

}  // namespace
}  // namespace bexd::exports::testing
