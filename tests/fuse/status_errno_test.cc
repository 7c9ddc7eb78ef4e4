// SPDX-License-Identifier: GPL-2.0-or-later
// Control-path statuses become the errno a FUSE client sees: a kernel failure as the kernel's
// errno, a driver's refusal as the errno a file system would give for it.
#include "fuse/status_errno.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "block/null_node.h"
#include "block/open.h"
#include "block/raw_node.h"
#include "tests/fuse/image_file.h"

namespace bexd::fuse::testing {
namespace {

TEST(StatusErrnoTest, KernelErrnosComeBack) {
  // What ftruncate(2) and fallocate(2) fail with.
  for (int error : {EPERM, EFBIG, EINVAL, ENOSPC, EIO, EBUSY, EOPNOTSUPP, EAGAIN}) {
    SCOPED_TRACE(strerrorname_np(error));
    EXPECT_EQ(ErrnoOf(absl::ErrnoToStatus(error, "ftruncate")), error);
  }
  // absl gives these EPERM's code.
  EXPECT_EQ(ErrnoOf(absl::ErrnoToStatus(EROFS, "ftruncate")), EPERM);
  EXPECT_EQ(ErrnoOf(absl::ErrnoToStatus(EACCES, "ftruncate")), EPERM);
  EXPECT_EQ(ErrnoOf(absl::OkStatus()), 0);
  EXPECT_EQ(ErrnoOf(absl::DataLossError("lost")), EIO);
}

// A node that cannot resize refuses with EPERM, as a memfd sealed against size changes does; a
// size too large is EFBIG, as past a file system's limit.
TEST(StatusErrnoTest, DriverRefusalsMapToTheErrnoAFileWouldGive) {
  auto null = block::OpenNullNode("null0", block::NullOptions{}, false);
  ASSERT_TRUE(null.ok());
  EXPECT_EQ(ErrnoOf((*null)->Truncate(4096)), EPERM);

  ImageFile image(1 << 20);
  auto file = block::OpenBlockNode(FileNode(image.path()));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(ErrnoOf((*file)->Truncate(uint64_t{INT64_MAX} + 1)), EFBIG);
  auto fixed = block::RawNode::Open("raw0", block::RawOptions{.size = 65536}, false, *file);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(ErrnoOf((*fixed)->Truncate(4096)), EPERM);
  auto shifted = block::RawNode::Open("raw1", block::RawOptions{.offset = 4096}, false, *file);
  ASSERT_TRUE(shifted.ok()) << shifted.status();
  EXPECT_EQ(ErrnoOf((*shifted)->Truncate(UINT64_MAX - 100)), EFBIG);
  EXPECT_EQ(ErrnoOf((*shifted)->Truncate(INT64_MAX)), EFBIG);
  auto read_only = block::RawNode::Open("raw2", block::RawOptions{}, true, *file);
  ASSERT_TRUE(read_only.ok()) << read_only.status();
  EXPECT_EQ(ErrnoOf((*read_only)->Truncate(4096)), EPERM);
}

}  // namespace
}  // namespace bexd::fuse::testing
