// SPDX-License-Identifier: GPL-2.0-or-later
// The core over the real file driver: data written through WRITE is read back through READ and
// compared with the backing file; sizes, holes and growth are checked on the file itself.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "tests/fuse/core_harness.h"
#include "tests/fuse/image_file.h"

namespace bexd::fuse::testing {
namespace {

constexpr uint64_t kImageSize = (4 << 20) + 512;  // not a multiple of the page size

uint64_t Getattr(CoreHarness& harness) {
  Reply reply = harness.Run(GetattrRequest(1));
  EXPECT_EQ(reply.header().error, 0);
  return reply.payload<fuse_attr_out>().attr.size;
}

Reply Fallocate(CoreHarness& harness, uint64_t offset, uint64_t length, uint32_t mode) {
  return harness.Run(FallocateRequest(1, offset, length, mode));
}

Reply Lseek(CoreHarness& harness, uint64_t offset, uint32_t whence) {
  return harness.Run(LseekRequest(1, offset, whence));
}

Reply Setattr(CoreHarness& harness, uint64_t size) {
  return harness.Run(SetattrSizeRequest(1, size));
}

class FileNodeTest : public ::testing::TestWithParam<bool> {};  // parameter: cache.direct

TEST_P(FileNodeTest, WrittenDataReadsBackThroughAnyBufferLayout) {
  ImageFile image(kImageSize);
  CoreHarness harness(FileNode(image.path(), GetParam()), Writable());
  harness.Init();
  const Layout layouts[] = {
      {},
      {.in_piece = 1000, .out_piece = 777},
      {.in_piece = 4096, .out_piece = 4096},
      {.in_piece = 300, .out_piece = 500},
      {.out_aliases_in = true},
      {.in_piece = 333, .out_piece = 512, .out_aliases_in = true},
  };
  uint32_t seed = 1;
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(seed);
    const uint64_t offset = seed * 12345;
    const std::vector<uint8_t> data = RandomBytes(65536 + seed, seed);
    Reply reply = harness.Run(WriteRequest(1, offset, data), layout);
    ASSERT_EQ(reply.completions, 1);
    ASSERT_EQ(reply.header().error, 0);
    EXPECT_EQ(reply.payload<fuse_write_out>().size, data.size());
    EXPECT_EQ(image.Read(offset, data.size()), data);

    reply = harness.Run(ReadRequest(1, offset, static_cast<uint32_t>(data.size())), layout);
    ASSERT_EQ(reply.result, sizeof(fuse_out_header) + data.size());
    EXPECT_EQ(reply.header().len, reply.result);
    EXPECT_EQ(reply.data(), data);
    ++seed;
  }
}

TEST_P(FileNodeTest, ManyRequestsInFlightTogether) {
  ImageFile image(kImageSize);
  CoreHarness harness(FileNode(image.path(), GetParam()), Writable());
  harness.Init();
  std::vector<std::vector<uint8_t>> writes;
  std::vector<std::vector<uint8_t>> reads;
  for (uint32_t i = 0; i < 32; ++i) {
    writes.push_back(WriteRequest(1, i * 8192, RandomBytes(8192, 100 + i)));
    reads.push_back(ReadRequest(1, i * 8192, 8192));
  }
  const Layout small{.out_capacity = 16384};
  for (const Reply& reply : harness.RunConcurrently(writes, small)) {
    EXPECT_EQ(reply.completions, 1);
    EXPECT_EQ(reply.payload<fuse_write_out>().size, 8192u);
  }
  std::vector<Reply> replies = harness.RunConcurrently(reads, small);
  for (uint32_t i = 0; i < 32; ++i) {
    EXPECT_EQ(replies[i].completions, 1);
    EXPECT_EQ(replies[i].data(), RandomBytes(8192, 100 + i)) << i;
  }
  QueueStatsSnapshot stats = QueueStatsSnapshot::Of(harness.queue().stats());
  EXPECT_EQ(stats.in_flight, 0u);
  EXPECT_EQ(stats.read_requests, 32u);
  EXPECT_EQ(stats.write_requests, 32u);
  EXPECT_EQ(stats.bytes_read, 32u * 8192);
  EXPECT_EQ(stats.bytes_written, 32u * 8192);
}

TEST_P(FileNodeTest, ReadsStopAtTheEnd) {
  ImageFile image(kImageSize);
  const std::vector<uint8_t> tail = RandomBytes(100, 7);
  image.Write(kImageSize - 100, tail);
  CoreHarness harness(FileNode(image.path(), GetParam()), Writable());
  harness.Init();
  Reply reply = harness.Run(ReadRequest(1, kImageSize - 100, 8192));
  ASSERT_EQ(reply.header().error, 0);
  EXPECT_EQ(reply.data(), tail);
  for (uint64_t offset : {kImageSize, kImageSize + 1, uint64_t{1} << 40}) {
    reply = harness.Run(ReadRequest(1, offset, 4096));
    EXPECT_EQ(reply.result, sizeof(fuse_out_header));
    EXPECT_EQ(reply.header().error, 0);
  }
}

TEST_P(FileNodeTest, WritesPastTheEndOfAFixedSizeExport) {
  ImageFile image(kImageSize);
  CoreHarness harness(FileNode(image.path(), GetParam()), Writable());
  harness.Init();
  const std::vector<uint8_t> data = RandomBytes(4096, 9);
  // Straddling the end: the part that fits is written, like a block device.
  Reply reply = harness.Run(WriteRequest(1, kImageSize - 1000, data));
  ASSERT_EQ(reply.header().error, 0);
  EXPECT_EQ(reply.payload<fuse_write_out>().size, 1000u);
  EXPECT_EQ(image.Read(kImageSize - 1000, 1000),
            std::vector<uint8_t>(data.begin(), data.begin() + 1000));
  // Wholly past it: nothing fits, EIO as from QSD.
  EXPECT_EQ(harness.Run(WriteRequest(1, kImageSize, data)).error(), EIO);
  EXPECT_EQ(harness.Run(WriteRequest(1, kImageSize + 8192, data)).error(), EIO);
  EXPECT_EQ(image.size(), kImageSize);
}

TEST_P(FileNodeTest, GrowableExportGrowsOnWriteAndFallocate) {
  ImageFile image(kImageSize);
  CoreHarness harness(FileNode(image.path(), GetParam()), Writable(/*growable=*/true));
  harness.Init();
  const std::vector<uint8_t> data = RandomBytes(5000, 11);
  const uint64_t offset = kImageSize + 12288;
  Reply reply = harness.Run(WriteRequest(1, offset, data));
  ASSERT_EQ(reply.header().error, 0);
  EXPECT_EQ(reply.payload<fuse_write_out>().size, data.size());
  EXPECT_EQ(image.size(), offset + data.size());
  EXPECT_EQ(Getattr(harness), offset + data.size());
  EXPECT_EQ(image.Read(offset, data.size()), data);
  reply = harness.Run(ReadRequest(1, kImageSize, 12288));
  EXPECT_EQ(reply.data(), std::vector<uint8_t>(12288, 0));  // the gap reads as zeroes

  ASSERT_EQ(Fallocate(harness, offset, 1 << 20, 0).header().error, 0);
  EXPECT_EQ(image.size(), offset + (1 << 20));
  EXPECT_EQ(image.Read(offset, data.size()), data);  // allocation keeps data
  // KEEP_SIZE never grows.
  ASSERT_EQ(Fallocate(harness, offset, 4 << 20, FALLOC_FL_KEEP_SIZE).header().error, 0);
  EXPECT_EQ(image.size(), offset + (1 << 20));
}

TEST_P(FileNodeTest, SetattrSizeResizesAWritableExport) {
  ImageFile image(kImageSize);
  CoreHarness harness(FileNode(image.path(), GetParam()), Writable());
  harness.Init();
  Reply reply = Setattr(harness, 1 << 20);
  ASSERT_EQ(reply.header().error, 0);
  EXPECT_EQ(reply.payload<fuse_attr_out>().attr.size, 1u << 20);
  EXPECT_EQ(image.size(), 1u << 20);
  ASSERT_EQ(Setattr(harness, 8 << 20).header().error, 0);
  EXPECT_EQ(image.size(), 8u << 20);
  EXPECT_EQ(Getattr(harness), 8u << 20);
  EXPECT_EQ(Setattr(harness, uint64_t{INT64_MAX} + 1).error(), EFBIG);
}

TEST_P(FileNodeTest, ReadOnlyExportServesReadsOnly) {
  ImageFile image(kImageSize);
  const std::vector<uint8_t> data = RandomBytes(4096, 13);
  image.Write(8192, data);
  SessionOptions options;
  CoreHarness harness(FileNode(image.path(), GetParam(), /*read_only=*/true), options);
  harness.Init();
  EXPECT_EQ(harness.Run(ReadRequest(1, 8192, 4096)).data(), data);
  EXPECT_EQ(harness.Run(WriteRequest(1, 8192, RandomBytes(4096, 14))).error(), EROFS);
  EXPECT_EQ(Setattr(harness, 4096).error(), EROFS);
  EXPECT_EQ(Fallocate(harness, 0, 4096, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE).error(), EROFS);
  EXPECT_EQ(image.Read(8192, 4096), data);
  EXPECT_EQ(image.size(), kImageSize);
}

// fallocate mode 0 reserves the range in the backing file, so running out of space shows now
// rather than on a later write, and leaves data where there was some.
TEST_P(FileNodeTest, PlainAllocationReservesStorageAndKeepsData) {
  ImageFile image(kImageSize);
  const std::vector<uint8_t> data = RandomBytes(8192, 17);
  image.Write(1 << 20, data);
  const uint64_t before = image.allocated();
  CoreHarness harness(FileNode(image.path(), GetParam()), Writable());
  harness.Init();
  ASSERT_EQ(Fallocate(harness, 512 << 10, 2 << 20, 0).header().error, 0);
  EXPECT_GE(image.allocated(), before + (2 << 20) - data.size());
  EXPECT_EQ(image.Read(1 << 20, data.size()), data);
  EXPECT_EQ(image.Read(512 << 10, 4096), std::vector<uint8_t>(4096, 0));
  EXPECT_EQ(image.size(), kImageSize);
  // KEEP_SIZE past the end reserves only what lies inside the node.
  ASSERT_EQ(Fallocate(harness, kImageSize - 4096, 1 << 20, FALLOC_FL_KEEP_SIZE).header().error, 0);
  EXPECT_EQ(image.size(), kImageSize);
}

TEST_P(FileNodeTest, PunchHoleAndZeroRangeReadBackAsZeroes) {
  ImageFile image(kImageSize);
  const std::vector<uint8_t> data = RandomBytes(1 << 20, 15);
  image.Write(0, data);
  CoreHarness harness(FileNode(image.path(), GetParam()), Writable());
  harness.Init();

  ASSERT_EQ(
      Fallocate(harness, 65536, 65536, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE).header().error,
      0);
  EXPECT_EQ(image.Read(65536, 65536), std::vector<uint8_t>(65536, 0));
  ASSERT_EQ(Fallocate(harness, 200000, 3000, FALLOC_FL_ZERO_RANGE).header().error, 0);
  EXPECT_EQ(image.Read(200000, 3000), std::vector<uint8_t>(3000, 0));
  // Neighbours are untouched.
  EXPECT_EQ(image.Read(0, 65536), std::vector<uint8_t>(data.begin(), data.begin() + 65536));
  EXPECT_EQ(image.Read(203000, 1000),
            std::vector<uint8_t>(data.begin() + 203000, data.begin() + 204000));
  // Plain allocation keeps the data.
  ASSERT_EQ(Fallocate(harness, 0, 65536, 0).header().error, 0);
  EXPECT_EQ(image.Read(0, 65536), std::vector<uint8_t>(data.begin(), data.begin() + 65536));
  // Ranges reaching past the end are clipped with KEEP_SIZE.
  ASSERT_EQ(
      Fallocate(harness, kImageSize - 512, 1 << 20, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)
          .header()
          .error,
      0);
  EXPECT_EQ(image.size(), kImageSize);

  EXPECT_EQ(Fallocate(harness, 0, 4096, FALLOC_FL_PUNCH_HOLE).error(), EOPNOTSUPP);
  EXPECT_EQ(
      Fallocate(harness, 0, 4096, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)
          .error(),
      EOPNOTSUPP);
  EXPECT_EQ(Fallocate(harness, 0, 4096, FALLOC_FL_COLLAPSE_RANGE).error(), EOPNOTSUPP);
  EXPECT_EQ(Fallocate(harness, 0, 0, 0).error(), EINVAL);
}

TEST_P(FileNodeTest, LseekFindsDataAndHoles) {
  ImageFile image(kImageSize);
  const uint64_t data_at = 1 << 20;
  const uint64_t data_end = data_at + 65536;
  image.Write(data_at, RandomBytes(65536, 17));
  CoreHarness harness(FileNode(image.path(), GetParam()), Writable());
  harness.Init();
  auto offset = [](const Reply& reply) { return reply.payload<fuse_lseek_out>().offset; };

  Reply reply = Lseek(harness, 0, SEEK_DATA);
  ASSERT_EQ(reply.header().error, 0);
  EXPECT_EQ(offset(reply), data_at);
  EXPECT_EQ(offset(Lseek(harness, data_at + 100, SEEK_DATA)), data_at + 100);
  EXPECT_EQ(offset(Lseek(harness, 0, SEEK_HOLE)), 0u);
  EXPECT_EQ(offset(Lseek(harness, data_at, SEEK_HOLE)), data_end);
  EXPECT_EQ(Lseek(harness, data_end, SEEK_DATA).error(), ENXIO);  // only a hole follows
  EXPECT_EQ(offset(Lseek(harness, data_end, SEEK_HOLE)), data_end);
  EXPECT_EQ(Lseek(harness, kImageSize, SEEK_DATA).error(), ENXIO);
  EXPECT_EQ(Lseek(harness, kImageSize, SEEK_HOLE).error(), ENXIO);

  EXPECT_EQ(offset(Lseek(harness, 12345, SEEK_SET)), 12345u);
  EXPECT_EQ(offset(Lseek(harness, static_cast<uint64_t>(-100), SEEK_END)), kImageSize - 100);
  EXPECT_EQ(offset(Lseek(harness, 100, SEEK_END)), kImageSize + 100);
  EXPECT_EQ(Lseek(harness, static_cast<uint64_t>(-int64_t{kImageSize} - 1), SEEK_END).error(),
            EINVAL);
  EXPECT_EQ(Lseek(harness, 0, SEEK_CUR).error(), EINVAL);
  EXPECT_EQ(Lseek(harness, 0, 77).error(), EINVAL);
}

TEST_P(FileNodeTest, FsyncAndDurableWritesSucceed) {
  ImageFile image(kImageSize);
  SessionOptions options = Writable();
  options.writethrough = true;
  CoreHarness harness(FileNode(image.path(), GetParam()), options);
  harness.Init();
  const std::vector<uint8_t> data = RandomBytes(4096, 19);
  ASSERT_EQ(harness.Run(WriteRequest(1, 0, data)).header().error, 0);
  ASSERT_EQ(harness.Run(WriteRequest(1, 4096, data, O_DSYNC)).header().error, 0);
  fuse_fsync_in fsync{1, 0, 0};
  Reply reply = harness.Run(RequestBytes(FUSE_FSYNC, 1).Append(fsync).Finish());
  EXPECT_EQ(reply.result, sizeof(fuse_out_header));
  EXPECT_EQ(reply.header().error, 0);
  EXPECT_EQ(image.Read(0, 4096), data);
  EXPECT_EQ(image.Read(4096, 4096), data);
}

INSTANTIATE_TEST_SUITE_P(CacheModes, FileNodeTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Direct" : "Buffered"; });

}  // namespace
}  // namespace bexd::fuse::testing
