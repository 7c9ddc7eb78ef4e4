// SPDX-License-Identifier: GPL-2.0-or-later
// The file driver on real block devices and real failures: a loop device, an image whose
// reads and writes fail with EIO (nbdkit's error filter behind nbdfuse, tests/support), a loop
// device on such an image whose writeback fails, and a full filesystem.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"
#include "tests/support/failing_disk.h"
#include "tests/support/loop_device.h"

namespace bexd::block {
namespace {

using testing::Pattern;
using testing::ReadAt;
using testing::RunOne;
using testing::WriteAt;

using bexd::testing::FailingDisk;
using bexd::testing::LoopDevice;

TEST(FileDevice, LoopDevice) {
  testing::ScratchDir dir;
  constexpr uint64_t kSize = 16 << 20;
  std::string backing = dir.CreateFile("backing", kSize);
  LoopDevice loop(backing);
  if (loop.path().empty()) GTEST_SKIP() << "losetup is not available (needs root and loop)";
  for (AioMode aio : testing::kAllAioModes) {
    auto node = testing::OpenFileOrFail(loop.path(), aio, true, DiscardMode::kUnmap);
    ASSERT_NE(node, nullptr);
    EXPECT_EQ(node->size(), kSize);
    EXPECT_GE(node->request_alignment(), 512u);
    auto queue = testing::MakeQueue(*node);
    std::vector<unsigned char> aligned = Pattern(65536, 1);
    std::vector<unsigned char> odd = Pattern(1001, 2);
    EXPECT_EQ(WriteAt(*queue, aligned.data(), aligned.size(), 1 << 20), 65536);
    EXPECT_EQ(WriteAt(*queue, odd.data(), odd.size(), (2 << 20) + 77), 1001);
    EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
    std::vector<unsigned char> back(65536);
    EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 1 << 20), 65536);
    EXPECT_EQ(back, aligned);
    back.resize(1001);
    EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), (2 << 20) + 77), 1001);
    EXPECT_EQ(back, odd);
    EXPECT_EQ(testing::ReadFile(backing, 1 << 20, 65536), aligned);
    EXPECT_EQ(testing::ReadFile(backing, (2 << 20) + 77, 1001), odd);
    std::vector<unsigned char> past(512);
    EXPECT_EQ(ReadAt(*queue, past.data(), past.size(), kSize), -EINVAL);

    EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, (1 << 20) + 4096, 8192), 8192);
    EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, (2 << 20) + 100, 10), 10);
    EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 4 << 20, 1 << 20), 1 << 20);
    EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
    std::vector<unsigned char> expected = aligned;
    std::memset(expected.data() + 4096, 0, 8192);
    EXPECT_EQ(testing::ReadFile(backing, 1 << 20, 65536), expected);
    expected = odd;
    std::memset(expected.data() + 23, 0, 10);
    EXPECT_EQ(testing::ReadFile(backing, (2 << 20) + 77, 1001), expected);

    bool data = false;
    EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 0, kSize, nullptr, 0, 0, &data), kSize);
    EXPECT_TRUE(data);
    // A device reports data everywhere and has the size it has.
    EXPECT_FALSE(node->capabilities().block_status);
    EXPECT_FALSE(node->capabilities().resize);
    absl::Status resize = node->Truncate(kSize * 2);
    EXPECT_EQ(resize.code(), absl::StatusCode::kPermissionDenied) << resize;
    EXPECT_EQ(node->size(), kSize);
  }
}

TEST(FileDevice, HostDeviceDriverOpensABlockDevice) {
  testing::ScratchDir dir;
  std::string backing = dir.CreateFile("backing", 4 << 20);
  LoopDevice loop(backing);
  if (loop.path().empty()) GTEST_SKIP() << "losetup is not available (needs root and loop)";
  FileOptions options;
  options.filename = loop.path();
  options.host_device = true;
  options.cache_direct = true;
  auto node = testing::OpenFile(options);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)->driver_name(), "host_device");
  EXPECT_EQ((*node)->size(), 4u << 20);
  auto queue = testing::MakeQueue(**node);
  std::vector<unsigned char> data = Pattern(4096, 9);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 8192), 4096);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(testing::ReadFile(backing, 8192, 4096), data);
}

TEST(FileDevice, IoErrorsAreReportedAndTheQueueKeepsWorking) {
  testing::ScratchDir dir;
  FailingDisk image(dir.path(), 16 << 20);
  if (!image.ok()) GTEST_SKIP() << image.why_not();
  for (AioMode aio : testing::kAllAioModes) {
    auto node = testing::OpenFileOrFail(image.path(), aio, /*direct=*/true);
    ASSERT_NE(node, nullptr);
    EXPECT_EQ(node->size(), 16u << 20);
    auto queue = testing::MakeQueue(*node);
    std::vector<unsigned char> data = Pattern(4096, 3);
    void* memory = nullptr;
    ASSERT_EQ(posix_memalign(&memory, 4096, 8192), 0);
    std::unique_ptr<void, decltype(&free)> buffer(memory, free);
    auto* bytes = static_cast<unsigned char*>(memory);
    std::memcpy(bytes, data.data(), 4096);
    EXPECT_EQ(WriteAt(*queue, bytes, 4096, 8192), 4096);

    image.SetFailing(true);
    EXPECT_EQ(ReadAt(*queue, bytes, 4096, 8192), -EIO);
    EXPECT_EQ(WriteAt(*queue, bytes, 4096, 8192), -EIO);
    // The bounce path (unaligned) reports the error the same way.
    EXPECT_EQ(ReadAt(*queue, bytes + 1, 100, 8193), -EIO);
    EXPECT_EQ(WriteAt(*queue, bytes + 1, 100, 8193), -EIO);
    image.SetFailing(false);

    std::memset(bytes, 0, 4096);
    EXPECT_EQ(ReadAt(*queue, bytes, 4096, 8192), 4096);
    EXPECT_EQ(std::vector<unsigned char>(bytes, bytes + 4096), data);
    EXPECT_EQ(queue->in_flight(), 0u);
  }
}

// fsyncgate: a node without O_DIRECT on a loop device over the failing image writes into the
// device's page cache. When writeback fails, fdatasync reports EIO once and succeeds from then
// on, while the disk keeps the old data. The node must fail every later flush, on every queue.
class FailingWriteback : public ::testing::TestWithParam<AioMode> {
 protected:
  void SetUp() override {
    disk_.emplace(dir_.path(), 16 << 20);
    if (!disk_->ok()) GTEST_SKIP() << disk_->why_not();
    loop_.emplace(disk_->path());
    if (loop_->path().empty()) GTEST_SKIP() << "losetup is not available (needs root and loop)";
  }
  std::shared_ptr<BlockNode> Open(bool direct) const {
    return testing::OpenFileOrFail(loop_->path(), GetParam(), direct);
  }
  // The disk's bytes, past the loop device's cache.
  std::vector<unsigned char> OnDisk(uint64_t offset, uint64_t length) const {
    return testing::ReadFile(disk_->path(), offset, length);
  }

  testing::ScratchDir dir_;
  std::optional<FailingDisk> disk_;
  std::optional<LoopDevice> loop_;  // declared last: detached before the disk goes
};

INSTANTIATE_TEST_SUITE_P(Aio, FailingWriteback, ::testing::ValuesIn(testing::kAllAioModes),
                         [](const ::testing::TestParamInfo<AioMode>& info) {
                           return testing::AioTestName(info.param);
                         });

TEST_P(FailingWriteback, FailedFlushStaysFailedUntilReopened) {
  const std::vector<unsigned char> old_data = Pattern(4096, 5);
  const std::vector<unsigned char> new_data = Pattern(4096, 6);
  {
    auto node = Open(/*direct=*/false);
    ASSERT_NE(node, nullptr);
    auto queue = testing::MakeQueue(*node);
    auto other_queue = testing::MakeQueue(*node);
    EXPECT_EQ(WriteAt(*queue, old_data.data(), 4096, 0), 4096);
    EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
    EXPECT_EQ(WriteAt(*queue, new_data.data(), 4096, 0), 4096);

    disk_->SetFailing(true);
    EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), -EIO);
    disk_->SetFailing(false);
    EXPECT_EQ(OnDisk(0, 4096), old_data);  // the premise: the new data never reached the disk
    EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), -EIO);
    EXPECT_EQ(RunOne(*other_queue, IoOp::kFlush, 0, 0), -EIO);
    EXPECT_EQ(node->flush_error(), EIO);

    // The flush still runs: what is written later reaches the disk, yet the flush fails.
    const std::vector<unsigned char> later = Pattern(4096, 7);
    EXPECT_EQ(WriteAt(*other_queue, later.data(), 4096, 8192), 4096);
    EXPECT_EQ(RunOne(*other_queue, IoOp::kFlush, 0, 0), -EIO);
    EXPECT_EQ(OnDisk(8192, 4096), later);
  }
  auto reopened = Open(/*direct=*/false);
  ASSERT_NE(reopened, nullptr);
  auto queue = testing::MakeQueue(*reopened);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(reopened->flush_error(), 0);
}

// A FUA write (RWF_DSYNC) syncs its range itself; when that writeback fails, the error is
// consumed just as a failed fdatasync consumes it, so the node's flushes fail from then on.
TEST_P(FailingWriteback, FailedFuaWriteMakesLaterFlushesFail) {
  auto node = Open(/*direct=*/false);
  ASSERT_NE(node, nullptr);
  auto queue = testing::MakeQueue(*node);
  const std::vector<unsigned char> data = Pattern(4096, 8);

  disk_->SetFailing(true);
  EXPECT_EQ(WriteAt(*queue, data.data(), 4096, 4096, kIoFua), -EIO);
  disk_->SetFailing(false);
  EXPECT_EQ(OnDisk(4096, 4096), std::vector<unsigned char>(4096, 0));
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), -EIO);
  EXPECT_EQ(node->flush_error(), EIO);
  // A FUA write that succeeds is durable by itself and reports success.
  EXPECT_EQ(WriteAt(*queue, data.data(), 4096, 4096, kIoFua), 4096);
  EXPECT_EQ(OnDisk(4096, 4096), data);
}

// With O_DIRECT nothing waits in the page cache: a failure says nothing about later flushes.
TEST_P(FailingWriteback, FailuresDoNotStickWithDirectIo) {
  auto node = Open(/*direct=*/true);
  ASSERT_NE(node, nullptr);
  auto queue = testing::MakeQueue(*node);
  void* memory = nullptr;
  ASSERT_EQ(posix_memalign(&memory, 4096, 4096), 0);
  std::unique_ptr<void, decltype(&free)> buffer(memory, free);
  std::memset(memory, 9, 4096);

  disk_->SetFailing(true);
  EXPECT_EQ(WriteAt(*queue, memory, 4096, 0, kIoFua), -EIO);
  disk_->SetFailing(false);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(node->flush_error(), 0);
}

// A read-only file system (EROFS even for root, whom permissions do not stop).
TEST(FileDevice, AutoReadOnlyOpensAnUnwritableImageReadOnly) {
  testing::ScratchDir dir;
  std::string mountpoint = dir.path() + "/ro";
  ASSERT_EQ(mkdir(mountpoint.c_str(), 0755), 0);
  if (mount("tmpfs", mountpoint.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs: " << strerror(errno);
  }
  std::string path = mountpoint + "/image";
  ASSERT_EQ(testing::Shell("truncate -s 4096 '" + path + "'"), 0);
  std::vector<unsigned char> data = Pattern(4096, 8);
  testing::WriteFile(path, data, 0);
  ASSERT_EQ(mount(nullptr, mountpoint.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0)
      << strerror(errno);
  {
    FileOptions options;
    options.filename = path;
    auto refused = testing::OpenFile(options);
    EXPECT_FALSE(refused.ok());
    auto node = testing::OpenFile(options, /*read_only=*/false, "disk0", /*auto_read_only=*/true);
    ASSERT_TRUE(node.ok()) << node.status();
    EXPECT_TRUE((*node)->read_only());
    auto queue = testing::MakeQueue(**node);
    std::vector<unsigned char> back(4096);
    EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 0), 4096);
    EXPECT_EQ(back, data);
    EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 0), -EROFS);
  }
  EXPECT_EQ(umount(mountpoint.c_str()), 0);
}

TEST(FileDevice, FullFilesystemReportsNoSpace) {
  testing::ScratchDir dir;
  std::string mountpoint = dir.path() + "/small";
  ASSERT_EQ(mkdir(mountpoint.c_str(), 0755), 0);
  if (mount("tmpfs", mountpoint.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs: " << strerror(errno);
  }
  {
    std::string path = mountpoint + "/image";
    ASSERT_EQ(testing::Shell("truncate -s 8M '" + path + "'"), 0);
    for (AioMode aio : testing::kAllAioModes) {
      auto node = testing::OpenFileOrFail(path, aio, /*direct=*/false);
      ASSERT_NE(node, nullptr);
      auto queue = testing::MakeQueue(*node);
      std::vector<unsigned char> data = Pattern(65536, 4);
      int64_t result = 0;
      uint64_t offset = 0;
      for (; offset < (8u << 20) && result >= 0; offset += data.size()) {
        result = WriteAt(*queue, data.data(), data.size(), offset);
      }
      EXPECT_EQ(result, -ENOSPC) << "after " << offset << " bytes";
      std::vector<unsigned char> back(65536);
      EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 0), 65536);
      EXPECT_EQ(back, data);
      EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 0, 8 << 20), 8 << 20);
    }
  }
  EXPECT_EQ(umount(mountpoint.c_str()), 0);
}

}  // namespace
}  // namespace bexd::block
