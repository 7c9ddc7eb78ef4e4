// SPDX-License-Identifier: GPL-2.0-or-later
// Size changes through the core over the real file driver: O_TRUNC opens (negotiated with
// FUSE_ATOMIC_O_TRUNC), SETATTR size and FALLOCATE past the end, for fixed-size and growable
// exports and for sessions whose size changes need `growable` (virtio-fs). Sizes, data and
// allocation are checked on the backing file itself.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "block/open.h"
#include "tests/fuse/core_harness.h"
#include "tests/fuse/image_file.h"
#include "tests/fuse/restricted_node.h"

namespace bexd::fuse::testing {
namespace {

constexpr uint64_t kImageSize = 4 << 20;
constexpr uint64_t kTiB = uint64_t{1} << 40;
// What `cp` and a shell's `>` send: the open flags of an existing file opened for writing.
constexpr uint32_t kTruncatingOpen = O_WRONLY | O_TRUNC | O_LARGEFILE;

// An image full of random bytes, so that kept, lost and overwritten data all show.
class SizeChangeTest : public ::testing::Test {
 protected:
  SizeChangeTest() : image_(kImageSize), original_(RandomBytes(kImageSize, 1)) {
    image_.Write(0, original_);
  }

  uint64_t PresentedSize(CoreHarness& harness) {
    Reply reply = harness.Run(GetattrRequest(1));
    EXPECT_EQ(reply.header().error, 0);
    return reply.payload<fuse_attr_out>().attr.size;
  }

  // OPEN with O_TRUNC, then WRITEs of `data` from offset 0, as the kernel sends them for `cp`.
  void TruncateAndWrite(CoreHarness& harness, const std::vector<uint8_t>& data) {
    ASSERT_EQ(harness.Run(OpenRequest(1, kTruncatingOpen)).header().error, 0);
    for (size_t at = 0; at < data.size(); at += 65536) {
      const size_t n = std::min<size_t>(65536, data.size() - at);
      Reply reply = harness.Run(WriteRequest(
          1, at, std::vector<uint8_t>(data.begin() + at, data.begin() + at + n), kTruncatingOpen));
      ASSERT_EQ(reply.header().error, 0) << "at " << at;
      ASSERT_EQ(reply.payload<fuse_write_out>().size, n);
    }
  }

  ImageFile image_;
  const std::vector<uint8_t> original_;
};

// Another client's truncate can land between a growable export's size check for a WRITE past
// the end and the node's own check, which then refuses the range (EINVAL). The core grows the node
// again and writes: the write succeeds, as if it had come after the truncate.
TEST_F(SizeChangeTest, AGrowingWriteRacingAShrinkStillLands) {
  absl::StatusOr<std::shared_ptr<block::BlockNode>> file =
      block::OpenBlockNode(FileNode(image_.path()));
  ASSERT_TRUE(file.ok()) << file.status();
  auto node = std::make_shared<RestrictedNode>(*file, (*file)->capabilities(), 1);
  CoreHarness harness(node, Writable(/*growable=*/true));
  harness.Init();
  const std::vector<uint8_t> data = RandomBytes(8192, 2);
  node->ShrinkBeforeNextWrite(0);
  Reply reply = harness.Run(WriteRequest(1, kImageSize + 4096, data));
  ASSERT_EQ(reply.header().error, 0);
  EXPECT_EQ(reply.payload<fuse_write_out>().size, data.size());
  EXPECT_EQ(image_.size(), kImageSize + 4096 + data.size());
  EXPECT_EQ(image_.Read(kImageSize + 4096, data.size()), data);
  EXPECT_EQ(image_.Read(0, 4096), std::vector<uint8_t>(4096, 0));  // the truncate did happen
}

TEST_F(SizeChangeTest, InitNegotiatesAtomicOTrunc) {
  CoreHarness harness(FileNode(image_.path()), Writable(false));
  Reply reply = harness.Run(InitRequest(7, 38, FUSE_ASYNC_READ | FUSE_ATOMIC_O_TRUNC));
  ASSERT_EQ(reply.header().error, 0);
  EXPECT_EQ(reply.payload<fuse_init_out>().flags, uint32_t{FUSE_ASYNC_READ | FUSE_ATOMIC_O_TRUNC});
}

// `cp` into a disk image: the size and the data past what is written stay.
TEST_F(SizeChangeTest, TruncatingOpenKeepsAFixedSizeExport) {
  CoreHarness harness(FileNode(image_.path()), Writable(false));
  harness.Init();
  ASSERT_EQ(harness.Run(OpenRequest(1, kTruncatingOpen)).header().error, 0);
  EXPECT_EQ(image_.size(), kImageSize);
  EXPECT_EQ(PresentedSize(harness), kImageSize);
  EXPECT_EQ(image_.Read(0, kImageSize), original_);

  const std::vector<uint8_t> source = RandomBytes((1 << 20) + 4097, 2);
  TruncateAndWrite(harness, source);
  EXPECT_EQ(PresentedSize(harness), kImageSize);
  std::vector<uint8_t> expected = source;
  expected.insert(expected.end(), original_.begin() + source.size(), original_.end());
  EXPECT_EQ(image_.size(), kImageSize);
  EXPECT_EQ(image_.Read(0, kImageSize), expected);
}

TEST_F(SizeChangeTest, TruncatingOpenEmptiesAGrowableExport) {
  for (bool resize_needs_growable : {false, true}) {
    SCOPED_TRACE(resize_needs_growable);
    image_.Write(0, original_);
    CoreHarness harness(FileNode(image_.path()), Writable(true, resize_needs_growable));
    harness.Init();
    ASSERT_EQ(harness.Run(OpenRequest(1, kTruncatingOpen)).header().error, 0);
    EXPECT_EQ(image_.size(), 0u);
    EXPECT_EQ(PresentedSize(harness), 0u);

    const std::vector<uint8_t> source = RandomBytes((1 << 20) + 4097, 3);
    TruncateAndWrite(harness, source);
    EXPECT_EQ(PresentedSize(harness), source.size());
    ASSERT_EQ(image_.size(), source.size());
    EXPECT_EQ(image_.Read(0, source.size()), source);
  }
}

TEST_F(SizeChangeTest, OpenWithoutTruncChangesNothing) {
  CoreHarness harness(FileNode(image_.path()), Writable(true));
  harness.Init();
  ASSERT_EQ(harness.Run(OpenRequest(1, O_RDWR)).header().error, 0);
  EXPECT_EQ(image_.size(), kImageSize);
  EXPECT_EQ(image_.Read(0, kImageSize), original_);
}

TEST_F(SizeChangeTest, TruncatingOpenOfAReadOnlyExportIsRefused) {
  CoreHarness harness(FileNode(image_.path(), false, /*read_only=*/true), SessionOptions());
  harness.Init();
  // O_RDONLY|O_TRUNC truncates on Linux, so it needs a writable export too.
  EXPECT_EQ(harness.Run(OpenRequest(1, O_RDONLY | O_TRUNC)).error(), EROFS);
  EXPECT_EQ(harness.Run(OpenRequest(1, kTruncatingOpen)).error(), EROFS);
  EXPECT_EQ(harness.session().open_handles(), 0u);
  EXPECT_EQ(image_.Read(0, kImageSize), original_);
}

// An explicit truncate (`truncate -s`, ftruncate) still resizes a writable fixed-size export.
TEST_F(SizeChangeTest, SetattrSizeResizesAWritableExport) {
  CoreHarness harness(FileNode(image_.path()), Writable(false));
  harness.Init();
  ASSERT_EQ(harness.Run(SetattrSizeRequest(1, 1 << 20)).header().error, 0);
  EXPECT_EQ(image_.size(), 1u << 20);
  ASSERT_EQ(harness.Run(SetattrSizeRequest(1, kImageSize)).header().error, 0);
  EXPECT_EQ(image_.size(), kImageSize);
  EXPECT_EQ(image_.Read(0, 1 << 20),
            std::vector<uint8_t>(original_.begin(), original_.begin() + (1 << 20)));
}

// QEMU iotest 308 ("Resize export"): fallocate past the end of a writable, non-growable export
// grows it and reserves the new range, as truncate would resize it.
TEST_F(SizeChangeTest, FallocatePastTheEndGrowsAWritableExport) {
  CoreHarness harness(FileNode(image_.path()), Writable(false));
  harness.Init();
  const uint64_t allocated = image_.allocated();
  ASSERT_EQ(harness.Run(FallocateRequest(1, kImageSize, 65536, 0)).header().error, 0);
  EXPECT_EQ(image_.size(), kImageSize + 65536);
  // The new range is reserved (128 more 512-byte blocks at least), not left a hole.
  EXPECT_GE(image_.allocated(), allocated + 65536);
  Reply reply = harness.Run(GetattrRequest(1));
  EXPECT_EQ(reply.payload<fuse_attr_out>().attr.size, kImageSize + 65536);
  // st_blocks is the image's footprint, the reserved range included.
  EXPECT_EQ(reply.payload<fuse_attr_out>().attr.blocks, image_.allocated() / 512);
  EXPECT_EQ(image_.Read(0, kImageSize), original_);
  EXPECT_EQ(image_.Read(kImageSize, 65536), std::vector<uint8_t>(65536, 0));

  // Starting past the end grows it too; the gap reads as zeroes.
  ASSERT_EQ(harness.Run(FallocateRequest(1, kImageSize + (1 << 20), 4096, 0)).header().error, 0);
  EXPECT_EQ(image_.size(), kImageSize + (1 << 20) + 4096);
  // ZERO_RANGE without KEEP_SIZE grows; with it, never.
  ASSERT_EQ(
      harness.Run(FallocateRequest(1, kImageSize, 2 << 20, FALLOC_FL_ZERO_RANGE)).header().error,
      0);
  EXPECT_EQ(image_.size(), kImageSize + (2 << 20));
  ASSERT_EQ(
      harness.Run(FallocateRequest(1, kImageSize, 4 << 20, FALLOC_FL_KEEP_SIZE)).header().error, 0);
  EXPECT_EQ(image_.size(), kImageSize + (2 << 20));
  EXPECT_EQ(image_.Read(0, kImageSize), original_);
}

// virtio-fs: an untrusted guest on a writable, fixed-size export cannot set the image to any
// size it likes; its writes still work.
TEST_F(SizeChangeTest, SizeChangesNeedGrowableWhereTheSessionSaysSo) {
  CoreHarness harness(FileNode(image_.path()), Writable(false, /*resize_needs_growable=*/true));
  harness.Init();
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, kTiB)).error(), EPERM);
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, 0)).error(), EPERM);
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, kImageSize + 1)).error(), EPERM);
  // Setting the size it has is no change.
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, kImageSize)).header().error, 0);
  EXPECT_EQ(harness.Run(FallocateRequest(1, kImageSize - 4096, 8192, 0)).error(), ENOSPC);
  EXPECT_EQ(harness.Run(FallocateRequest(1, kImageSize, 4096, FALLOC_FL_ZERO_RANGE)).error(),
            ENOSPC);
  // Inside the node, and KEEP_SIZE, allocation works as ever.
  EXPECT_EQ(harness.Run(FallocateRequest(1, 0, 8192, 0)).header().error, 0);
  EXPECT_EQ(
      harness.Run(FallocateRequest(1, kImageSize - 4096, 8192, FALLOC_FL_KEEP_SIZE)).header().error,
      0);
  EXPECT_EQ(image_.size(), kImageSize);
  EXPECT_EQ(image_.Read(0, kImageSize), original_);

  const std::vector<uint8_t> source = RandomBytes(100000, 4);
  TruncateAndWrite(harness, source);
  EXPECT_EQ(image_.size(), kImageSize);
  EXPECT_EQ(image_.Read(0, source.size()), source);
}

TEST_F(SizeChangeTest, GrowableSessionsMayResizeEvenWhereSizeChangesNeedGrowable) {
  CoreHarness harness(FileNode(image_.path()), Writable(true, /*resize_needs_growable=*/true));
  harness.Init();
  ASSERT_EQ(harness.Run(SetattrSizeRequest(1, 1 << 20)).header().error, 0);
  EXPECT_EQ(image_.size(), 1u << 20);
  ASSERT_EQ(harness.Run(FallocateRequest(1, 1 << 20, 65536, 0)).header().error, 0);
  EXPECT_EQ(image_.size(), (1u << 20) + 65536);
  EXPECT_EQ(image_.Read(0, 1 << 20),
            std::vector<uint8_t>(original_.begin(), original_.begin() + (1 << 20)));
}

}  // namespace
}  // namespace bexd::fuse::testing
