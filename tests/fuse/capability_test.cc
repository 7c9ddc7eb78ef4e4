// SPDX-License-Identifier: GPL-2.0-or-later
// The core answers from what a node says it can do (block::Capabilities, request_alignment()):
// size changes a node cannot make are refused before it is asked, with the errno the kernel's own
// file systems give; a punched hole on a node that frees nothing still reads back as zeroes;
// st_blksize follows the alignment. Real drivers where one lacks the capability, a RestrictedNode
// over a real one where none does.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <vector>

#include "block/open.h"
#include "tests/fuse/core_harness.h"
#include "tests/fuse/image_file.h"
#include "tests/fuse/restricted_node.h"

namespace bexd::fuse::testing {
namespace {

constexpr uint64_t kSize = 4 << 20;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint32_t kPunch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;

block::BlockdevOptions NullNode() {
  block::BlockdevOptions options;
  options.node_name = "null0";
  options.driver = block::NullOptions{kSize, /*read_zeroes=*/true, 0};
  return options;
}

// A raw node over a file node on `path`.
std::shared_ptr<block::BlockNode> RawNode(const std::string& path, block::RawOptions raw) {
  absl::StatusOr<std::shared_ptr<block::BlockNode>> file = block::OpenBlockNode(FileNode(path));
  if (!file.ok()) {
    ADD_FAILURE() << file.status();
    return nullptr;
  }
  block::BlockdevOptions options;
  options.node_name = "raw0";
  options.driver = raw;
  absl::StatusOr<std::shared_ptr<block::BlockNode>> node =
      block::OpenBlockNode(options, {.file = *file});
  if (!node.ok()) {
    ADD_FAILURE() << node.status();
    return nullptr;
  }
  return *node;
}

uint64_t PresentedSize(CoreHarness& harness) {
  return harness.Run(GetattrRequest(1)).payload<fuse_attr_out>().attr.size;
}

// A node that cannot change its size answers EPERM to truncate, as a memfd sealed against
// growing and shrinking does (and truncate(2) documents), before the driver is asked; FALLOCATE
// past its end answers ENOSPC, as a WRITE there does.
TEST(NodeResizeTest, TruncatingANullExportIsEperm) {
  CoreHarness harness(NullNode(), Writable());
  harness.Init();
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, 0)).error(), EPERM);
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, kSize + 4096)).error(), EPERM);
  EXPECT_EQ(harness.Run(FallocateRequest(1, kSize, 4096, 0)).error(), ENOSPC);
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, kSize)).header().error, 0);  // no change
  EXPECT_EQ(PresentedSize(harness), kSize);
}

TEST(NodeResizeTest, TruncatingARawNodeOfFixedSizeIsEperm) {
  ImageFile image(kSize);
  CoreHarness harness(RawNode(image.path(), {.offset = kMiB, .size = kMiB}), Writable());
  harness.Init();
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, kMiB / 2)).error(), EPERM);
  EXPECT_EQ(harness.Run(FallocateRequest(1, kMiB, 4096, 0)).error(), ENOSPC);
  EXPECT_EQ(PresentedSize(harness), kMiB);
  EXPECT_EQ(image.size(), kSize);
}

TEST(NodeResizeTest, ARawNodeToTheEndOfItsChildResizesTheChild) {
  ImageFile image(kSize);
  CoreHarness harness(RawNode(image.path(), {.offset = kMiB}), Writable());
  harness.Init();
  ASSERT_EQ(harness.Run(SetattrSizeRequest(1, kMiB)).header().error, 0);
  EXPECT_EQ(image.size(), 2 * kMiB);
  // A size the file cannot have once the offset is added: EFBIG, as for a file past the file
  // system's limit.
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, INT64_MAX)).error(), EFBIG);
  EXPECT_EQ(image.size(), 2 * kMiB);
}

// A refusal the kernel makes reaches the client as the kernel's errno.
TEST(NodeResizeTest, TheKernelsRefusalReachesTheClient) {
  SealedFile sealed(kSize);
  CoreHarness harness(FileNode(sealed.path()), Writable());
  harness.Init();
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, kMiB)).error(), EPERM);
  EXPECT_EQ(harness.Run(FallocateRequest(1, kSize, 4096, 0)).error(), EPERM);
  EXPECT_EQ(PresentedSize(harness), kSize);
}

// discard=ignore frees nothing, but a punched hole must still read back as zeroes: the core asks
// for zeroes without unmapping, and the storage stays allocated. With discard=unmap it is freed.
TEST(PunchHoleTest, DiscardIgnoreZeroesAndKeepsTheStorage) {
  for (block::DiscardMode discard : {block::DiscardMode::kIgnore, block::DiscardMode::kUnmap}) {
    SCOPED_TRACE(discard == block::DiscardMode::kIgnore ? "discard=ignore" : "discard=unmap");
    ImageFile image(kSize);
    image.Write(0, RandomBytes(kSize, 21));
    CoreHarness harness(RawNode(image.path(), {.discard = discard}), Writable());
    harness.Init();
    const uint64_t allocated = image.allocated();
    ASSERT_EQ(harness.Run(FallocateRequest(1, kMiB, 2 * kMiB, kPunch)).header().error, 0);
    EXPECT_EQ(image.Read(kMiB, 2 * kMiB), std::vector<uint8_t>(2 * kMiB, 0));
    Reply read = harness.Run(ReadRequest(1, kMiB, 65536));
    EXPECT_EQ(read.data(), std::vector<uint8_t>(65536, 0));
    if (discard == block::DiscardMode::kIgnore) {
      EXPECT_EQ(image.allocated(), allocated);
    } else {
      EXPECT_LE(image.allocated(), allocated - 2 * kMiB);
    }
  }
}

class RestrictedNodeTest : public ::testing::Test {
 protected:
  // The interface's default capabilities with `field` set to `value`.
  static block::Capabilities With(bool block::Capabilities::*field, bool value) {
    block::Capabilities capabilities;
    capabilities.*field = value;
    return capabilities;
  }

  // A RestrictedNode over a null node.
  std::shared_ptr<RestrictedNode> Restricted(block::Capabilities capabilities,
                                             uint32_t alignment = 1) {
    absl::StatusOr<std::shared_ptr<block::BlockNode>> real = block::OpenBlockNode(NullNode());
    EXPECT_TRUE(real.ok()) << real.status();
    return std::make_shared<RestrictedNode>(*real, capabilities, alignment);
  }
};

TEST_F(RestrictedNodeTest, StBlksizeIsTheRequestAlignmentAsAPowerOfTwoOfAtLeastAPage) {
  for (auto [alignment, blksize] :
       {std::pair{1u, 4096u}, {512u, 4096u}, {4096u, 4096u}, {6000u, 8192u}, {65536u, 65536u}}) {
    SCOPED_TRACE(alignment);
    CoreHarness harness(Restricted({}, alignment), SessionOptions());
    harness.Init();
    EXPECT_EQ(harness.Run(GetattrRequest(1)).payload<fuse_attr_out>().attr.blksize, blksize);
  }
}

TEST_F(RestrictedNodeTest, WithoutWriteZeroesZeroingIsEopnotsupp) {
  std::shared_ptr<RestrictedNode> node =
      Restricted(With(&block::Capabilities::write_zeroes, false));
  CoreHarness harness(node, Writable());
  harness.Init();
  EXPECT_EQ(harness.Run(FallocateRequest(1, 0, 4096, FALLOC_FL_ZERO_RANGE)).error(), EOPNOTSUPP);
  EXPECT_EQ(harness.Run(FallocateRequest(1, 0, 4096, kPunch)).error(), EOPNOTSUPP);
  EXPECT_TRUE(node->seen().empty());
  EXPECT_EQ(harness.Run(FallocateRequest(1, 0, 4096, 0)).header().error, 0);  // allocation works
  ASSERT_EQ(node->seen().size(), 1u);
  EXPECT_EQ(node->seen()[0].op, block::IoOp::kAllocate);
}

TEST_F(RestrictedNodeTest, PunchHoleUnmapsOnlyWhereTheNodeDiscards) {
  for (bool discard : {false, true}) {
    SCOPED_TRACE(discard);
    std::shared_ptr<RestrictedNode> node = Restricted(With(&block::Capabilities::discard, discard));
    CoreHarness harness(node, Writable());
    harness.Init();
    ASSERT_EQ(harness.Run(FallocateRequest(1, 0, 4096, kPunch)).header().error, 0);
    ASSERT_EQ(node->seen().size(), 1u);
    EXPECT_EQ(node->seen()[0].op, block::IoOp::kWriteZeroes);
    EXPECT_EQ(node->seen()[0].flags, discard ? uint32_t{block::kIoMayUnmap} : 0u);
  }
}

TEST_F(RestrictedNodeTest, WithoutBlockStatusEverythingIsData) {
  std::shared_ptr<RestrictedNode> node =
      Restricted(With(&block::Capabilities::block_status, false));
  CoreHarness harness(node, SessionOptions());
  harness.Init();
  EXPECT_EQ(harness.Run(LseekRequest(1, 100, SEEK_DATA)).payload<fuse_lseek_out>().offset, 100u);
  EXPECT_EQ(harness.Run(LseekRequest(1, 100, SEEK_HOLE)).payload<fuse_lseek_out>().offset, kSize);
  EXPECT_EQ(harness.Run(LseekRequest(1, kSize, SEEK_DATA)).error(), ENXIO);
  EXPECT_TRUE(node->seen().empty());

  // With it, the node is asked: a null node with read-zeroes is one hole.
  CoreHarness asking(Restricted({}), SessionOptions());
  asking.Init();
  EXPECT_EQ(asking.Run(LseekRequest(1, 100, SEEK_DATA)).error(), ENXIO);
  EXPECT_EQ(asking.Run(LseekRequest(1, 100, SEEK_HOLE)).payload<fuse_lseek_out>().offset, 100u);
}

TEST_F(RestrictedNodeTest, WithoutFlushFsyncIsAnsweredAtOnce) {
  std::shared_ptr<RestrictedNode> node = Restricted(With(&block::Capabilities::flush, false));
  CoreHarness harness(node, Writable());
  harness.Init();
  EXPECT_EQ(harness.Run(FsyncRequest(1)).header().error, 0);
  EXPECT_TRUE(node->seen().empty());
}

// A durable write (O_DSYNC, or a writethrough export) is a FUA write, or on a node without FUA
// (QEMU's qcow2 has none) a write and then a flush, answered once both are done.
TEST_F(RestrictedNodeTest, DurableWritesWithoutFuaAreFollowedByAFlush) {
  for (bool fua : {true, false}) {
    SCOPED_TRACE(fua);
    std::shared_ptr<RestrictedNode> node = Restricted(With(&block::Capabilities::fua, fua));
    CoreHarness harness(node, Writable());
    harness.Init();
    Reply reply = harness.Run(WriteRequest(1, 4096, std::vector<uint8_t>(8192, 7), O_DSYNC));
    ASSERT_EQ(reply.header().error, 0);
    EXPECT_EQ(reply.payload<fuse_write_out>().size, 8192u);
    ASSERT_EQ(node->seen().size(), fua ? 1u : 2u);
    EXPECT_EQ(node->seen()[0].op, block::IoOp::kWrite);
    EXPECT_EQ(node->seen()[0].flags, fua ? uint32_t{block::kIoFua} : 0u);
    if (!fua) {
      EXPECT_EQ(node->seen()[1].op, block::IoOp::kFlush);
    }

    // Not durable: a plain write either way.
    ASSERT_EQ(harness.Run(WriteRequest(1, 0, std::vector<uint8_t>(512, 7))).header().error, 0);
    EXPECT_EQ(node->seen().back().op, block::IoOp::kWrite);
    EXPECT_EQ(node->seen().back().flags, 0u);
  }
}

TEST_F(RestrictedNodeTest, WithoutResizeTheNodeIsNeverAskedToResize) {
  std::shared_ptr<RestrictedNode> node = Restricted(With(&block::Capabilities::resize, false));
  CoreHarness harness(node, Writable());
  harness.Init();
  EXPECT_EQ(harness.Run(SetattrSizeRequest(1, kMiB)).error(), EPERM);
  EXPECT_EQ(harness.Run(FallocateRequest(1, kSize, 4096, 0)).error(), ENOSPC);
  EXPECT_EQ(node->truncate_calls(), 0);
  SessionOptions growable = Writable(/*growable=*/true);
  EXPECT_FALSE(Session::Create(node, growable).ok());
}

}  // namespace
}  // namespace bexd::fuse::testing
