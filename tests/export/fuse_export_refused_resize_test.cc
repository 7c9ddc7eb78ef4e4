// SPDX-License-Identifier: GPL-2.0-or-later
// Size changes an export cannot make reach the user as the errno a file system of the kernel's
// would answer, checked through a real mount with truncate(2) and ftruncate(2): EPERM where the
// node cannot change its size (null-co, raw with size=), as a memfd sealed against growing and
// shrinking answers; EROFS on a read-only export. Nothing changes, on the mount or on disk.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "block/raw_node.h"
#include "tests/export/export_fixture.h"

namespace bexd::exports::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// The errno truncate(2) leaves, or 0 if it succeeded.
int TruncateErrno(const std::string& path, uint64_t size) {
  return ::truncate(path.c_str(), static_cast<off_t>(size)) == 0 ? 0 : errno;
}

// The errno ftruncate(2) leaves on a descriptor opened for writing, or 0 if it succeeded.
int FtruncateErrno(const std::string& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  if (fd < 0) return -1;
  const int error = ::ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
  ::close(fd);
  return error;
}

void WriteImage(const std::string& path, uint64_t size) {
  std::vector<uint8_t> bytes(size);
  FillPattern(bytes.data(), bytes.size(), 0, 7);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

using RefusedResizeTest = FuseExportTest;

TEST_F(RefusedResizeTest, WritableNullExportIsEperm) {
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, /*writable=*/true), OpenNullNode(4 * kMiB)), nullptr);
  EXPECT_EQ(TruncateErrno(mountpoint, kMiB), EPERM);
  EXPECT_EQ(TruncateErrno(mountpoint, 8 * kMiB), EPERM);
  EXPECT_EQ(FtruncateErrno(mountpoint, 0), EPERM);
  EXPECT_EQ(FtruncateErrno(mountpoint, 8 * kMiB), EPERM);
  // Setting the size it has is no change, and succeeds.
  EXPECT_EQ(TruncateErrno(mountpoint, 4 * kMiB), 0);
  EXPECT_EQ(FileSize(mountpoint), 4 * kMiB);
}

TEST_F(RefusedResizeTest, RawNodeWithAFixedSizeIsEperm) {
  const std::string image = scratch_.path() + "/image";
  ASSERT_NO_FATAL_FAILURE(WriteImage(image, 4 * kMiB));
  const std::vector<uint8_t> before = ReadWholeFile(image);
  auto raw =
      block::RawNode::Open("raw0", {.offset = kMiB, .size = 2 * kMiB}, false, OpenFileNode(image));
  ASSERT_TRUE(raw.ok()) << raw.status();
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, /*writable=*/true), *raw), nullptr);
  EXPECT_EQ(TruncateErrno(mountpoint, kMiB), EPERM);
  EXPECT_EQ(FtruncateErrno(mountpoint, 3 * kMiB), EPERM);
  EXPECT_EQ(FileSize(mountpoint), 2 * kMiB);
  for (auto& running : exports_) running->Stop();
  EXPECT_TRUE(ReadWholeFile(image) == before) << "the image changed";
}

TEST_F(RefusedResizeTest, ReadOnlyFileExportIsErofs) {
  const std::string image = scratch_.path() + "/image";
  ASSERT_NO_FATAL_FAILURE(WriteImage(image, 4 * kMiB));
  const std::vector<uint8_t> before = ReadWholeFile(image);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(
      Start(FuseOptions(mountpoint, /*writable=*/false), OpenFileNode(image, /*read_only=*/true)),
      nullptr);
  EXPECT_EQ(TruncateErrno(mountpoint, kMiB), EROFS);
  EXPECT_EQ(TruncateErrno(mountpoint, 8 * kMiB), EROFS);
  // Not even a descriptor to ftruncate: opening for writing is refused.
  EXPECT_EQ(::open(mountpoint.c_str(), O_RDWR | O_CLOEXEC), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(FileSize(mountpoint), 4 * kMiB);
  for (auto& running : exports_) running->Stop();
  EXPECT_TRUE(ReadWholeFile(image) == before) << "the image changed";
}

}  // namespace
}  // namespace bexd::exports::testing
