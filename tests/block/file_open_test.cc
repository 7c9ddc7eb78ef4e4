// SPDX-License-Identifier: GPL-2.0-or-later
// Opening file nodes: error messages, read-only nodes and image locking.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::ReadAt;
using testing::RunOne;
using testing::WriteAt;

FileOptions Options(const std::string& path, LockingMode locking = LockingMode::kAuto) {
  FileOptions options;
  options.filename = path;
  options.locking = locking;
  return options;
}

bool Contains(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

// QEMU's words, which scripts match.
TEST(FileOpen, MissingFileNamesTheFile) {
  testing::ScratchDir dir;
  std::string path = dir.path() + "/missing.img";
  auto node = testing::OpenFile(Options(path));
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(node.status().message(), "Could not open '" + path + "': No such file or directory");
}

TEST(FileOpen, DirectoryIsRefused) {
  testing::ScratchDir dir;
  auto writable = testing::OpenFile(Options(dir.path()));
  ASSERT_FALSE(writable.ok());
  EXPECT_TRUE(Contains(writable.status(), "Is a directory")) << writable.status();
  auto read_only = testing::OpenFile(Options(dir.path()), /*read_only=*/true);
  ASSERT_FALSE(read_only.ok());
  EXPECT_TRUE(Contains(read_only.status(), "is a directory, not a regular file or block device"))
      << read_only.status();
}

TEST(FileOpen, HostDeviceRefusesARegularFile) {
  testing::ScratchDir dir;
  std::string path = dir.CreateFile("image", 1 << 20);
  FileOptions options = Options(path);
  options.host_device = true;
  auto node = testing::OpenFile(options);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(node.status().message(), "node 'disk0': 'host_device' driver requires '" + path +
                                         "' to be either a character or block device");
  // driver=file takes it.
  options.host_device = false;
  auto file = testing::OpenFile(options);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->driver_name(), "file");
}

TEST(FileOpen, EmptyFilenameIsRefused) {
  auto node = testing::OpenFile(Options(""));
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FileOpen, ReadOnlyNode) {
  testing::ScratchDir dir;
  std::string path = dir.CreateFile("image", 65536);
  testing::WriteFile(path, testing::Pattern(4096, 1), 0);
  // Read-only nodes open files the daemon may not write.
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  auto node = testing::OpenFile(Options(path), /*read_only=*/true);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE((*node)->read_only());
  auto queue = testing::MakeQueue(**node);
  std::vector<unsigned char> data(4096);
  EXPECT_EQ(ReadAt(*queue, data.data(), 4096, 0), 4096);
  EXPECT_EQ(data, testing::Pattern(4096, 1));
  EXPECT_EQ(WriteAt(*queue, data.data(), 4096, 0), -EROFS);
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 0, 4096), -EROFS);
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 0, 4096), -EROFS);
  EXPECT_EQ(RunOne(*queue, IoOp::kAllocate, 0, 4096), -EROFS);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ((*node)->Truncate(4096).code(), absl::StatusCode::kPermissionDenied);
  // Nothing to flush, no size to change.
  EXPECT_FALSE((*node)->capabilities().flush);
  EXPECT_FALSE((*node)->capabilities().resize);
}

TEST(FileOpen, CapabilitiesFollowTheOptions) {
  testing::ScratchDir dir;
  std::string path = dir.CreateFile("image", 65536);
  for (DiscardMode discard : {DiscardMode::kIgnore, DiscardMode::kUnmap}) {
    for (bool no_flush : {false, true}) {
      FileOptions options = Options(path);
      options.discard = discard;
      options.cache_no_flush = no_flush;
      auto node = testing::OpenFile(options);
      ASSERT_TRUE(node.ok()) << node.status();
      const Capabilities capabilities = (*node)->capabilities();
      EXPECT_EQ(capabilities.discard, discard == DiscardMode::kUnmap);
      EXPECT_TRUE(capabilities.write_zeroes);
      EXPECT_TRUE(capabilities.block_status);
      EXPECT_EQ(capabilities.flush, !no_flush);
      EXPECT_TRUE(capabilities.fua);
      EXPECT_TRUE(capabilities.resize);
    }
  }
}

TEST(FileOpen, SecondWriterIsRefused) {
  testing::ScratchDir dir;
  std::string path = dir.CreateFile("image", 65536);
  auto first = testing::OpenFile(Options(path));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = testing::OpenFile(Options(path, LockingMode::kOn), false, "disk1");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(second.status(), "node 'disk1': '" + path + "'")) << second.status();
  EXPECT_TRUE(Contains(second.status(), "locked by another process or node")) << second.status();
  // A reader would see data change under it: refused too.
  EXPECT_FALSE(testing::OpenFile(Options(path), /*read_only=*/true).ok());
  // locking=off skips the check.
  EXPECT_TRUE(testing::OpenFile(Options(path, LockingMode::kOff)).ok());
  // Closing the first node releases its locks.
  first->reset();
  EXPECT_TRUE(testing::OpenFile(Options(path)).ok());
}

TEST(FileOpen, ReadersShareButKeepWritersOut) {
  testing::ScratchDir dir;
  std::string path = dir.CreateFile("image", 65536);
  auto first = testing::OpenFile(Options(path), /*read_only=*/true);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = testing::OpenFile(Options(path), /*read_only=*/true);
  ASSERT_TRUE(second.ok()) << second.status();
  auto writer = testing::OpenFile(Options(path));
  ASSERT_FALSE(writer.ok());
  EXPECT_TRUE(Contains(writer.status(), "locked by another process or node")) << writer.status();
}

// force-share (QEMU's, read-only only): a reader that refuses nothing to others, so it can read an
// image another process writes (a running VM's disk), and a writer can still open next to it.
TEST(FileOpen, ForceShareReadsAnImageAWriterHolds) {
  testing::ScratchDir dir;
  std::string path = dir.CreateFile("image", 65536);
  auto writer = testing::OpenFile(Options(path));
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto writer_queue = testing::MakeQueue(**writer);
  const std::vector<unsigned char> data = testing::Pattern(4096, 31);
  ASSERT_EQ(WriteAt(*writer_queue, data.data(), data.size(), 8192), 4096);

  EXPECT_FALSE(testing::OpenFile(Options(path), /*read_only=*/true).ok());
  FileOptions shared = Options(path, LockingMode::kOn);
  shared.force_share = true;
  auto reader = testing::OpenFile(shared, /*read_only=*/true, "peek");
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto reader_queue = testing::MakeQueue(**reader);
  std::vector<unsigned char> back(4096);
  EXPECT_EQ(ReadAt(*reader_queue, back.data(), back.size(), 8192), 4096);
  EXPECT_EQ(back, data);

  writer_queue.reset();
  writer->reset();
  auto next_writer = testing::OpenFile(Options(path));
  EXPECT_TRUE(next_writer.ok()) << next_writer.status();
}

// The lock bytes are QEMU's, so QEMU tools see a bexd writer and stay out.
TEST(FileOpen, QemuSeesTheLock) {
  if (testing::Shell("command -v qemu-io >/dev/null") != 0) GTEST_SKIP() << "no qemu-io";
  testing::ScratchDir dir;
  std::string path = dir.CreateFile("image", 65536);
  auto node = testing::OpenFile(Options(path));
  ASSERT_TRUE(node.ok()) << node.status();
  std::string log = dir.path() + "/qemu-io.log";
  int status = testing::Shell("qemu-io -f raw -c 'write 0 512' '" + path + "' >'" + log + "' 2>&1");
  EXPECT_NE(status, 0);
  EXPECT_EQ(testing::Shell("grep -q 'Failed to get \"write\" lock' '" + log + "'"), 0);
  node->reset();
  EXPECT_EQ(testing::Shell("qemu-io -f raw -c 'write 0 512' '" + path + "' >/dev/null 2>&1"), 0);
}

}  // namespace
}  // namespace bexd::block
