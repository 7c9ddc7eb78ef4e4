// SPDX-License-Identifier: GPL-2.0-or-later
// INIT and the file opcodes against the real null driver.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "fuse/fuse_abi_ext.h"
#include "tests/fuse/core_harness.h"

namespace bexd::fuse::testing {
namespace {

constexpr uint64_t kNullSize = 64 << 20;

block::BlockdevOptions NullNode(bool read_only = false) {
  block::BlockdevOptions options;
  options.node_name = "null0";
  options.read_only = read_only;
  options.driver = block::NullOptions{kNullSize, /*read_zeroes=*/true, 0};
  return options;
}

TEST(BasicOpsTest, InitNegotiatesLargeRequestsAndAsyncIo) {
  CoreHarness harness(NullNode(), Writable());
  Reply reply = harness.Run(InitRequest());
  ASSERT_EQ(reply.completions, 1);
  ASSERT_EQ(reply.result, sizeof(fuse_out_header) + sizeof(fuse_init_out));
  EXPECT_EQ(reply.header().error, 0);
  EXPECT_EQ(reply.header().unique, 1u);
  auto out = reply.payload<fuse_init_out>();
  EXPECT_EQ(out.major, 7u);
  EXPECT_EQ(out.minor, 38u);
  EXPECT_EQ(out.max_write, 1u << 20);
  EXPECT_EQ(out.max_pages, 256);
  EXPECT_EQ(out.max_background, 64);
  EXPECT_GT(out.congestion_threshold, 0);
  EXPECT_LE(out.congestion_threshold, out.max_background);
  EXPECT_EQ(out.time_gran, 1u);
  const uint64_t flags = out.flags | (uint64_t{out.flags2} << 32);
  for (uint64_t flag :
       {uint64_t{FUSE_ASYNC_READ}, uint64_t{FUSE_ASYNC_DIO}, uint64_t{FUSE_ATOMIC_O_TRUNC},
        uint64_t{FUSE_BIG_WRITES}, uint64_t{FUSE_MAX_PAGES}, uint64_t{FUSE_INIT_EXT},
        abi::kDirectIoAllowMmap}) {
    EXPECT_TRUE(flags & flag) << std::hex << flag;
  }
  // Not implemented, so not claimed.
  for (uint64_t flag :
       {uint64_t{FUSE_WRITEBACK_CACHE}, uint64_t{FUSE_POSIX_LOCKS}, uint64_t{FUSE_FLOCK_LOCKS},
        uint64_t{FUSE_SPLICE_READ}, uint64_t{FUSE_DO_READDIRPLUS}, uint64_t{FUSE_PARALLEL_DIROPS},
        uint64_t{FUSE_POSIX_ACL}}) {
    EXPECT_FALSE(flags & flag) << std::hex << flag;
  }
  EXPECT_TRUE(harness.session().initialized());
}

TEST(BasicOpsTest, GetattrPresentsARegularFileOfTheNodeSize) {
  CoreHarness harness(NullNode(), Writable());
  harness.Init();
  fuse_getattr_in in{};
  Reply reply = harness.Run(RequestBytes(FUSE_GETATTR, 1).Append(in).Finish());
  ASSERT_EQ(reply.result, sizeof(fuse_out_header) + sizeof(fuse_attr_out));
  EXPECT_EQ(reply.header().error, 0);
  EXPECT_EQ(reply.header().unique, 7u);
  auto out = reply.payload<fuse_attr_out>();
  EXPECT_EQ(out.attr.size, kNullSize);
  EXPECT_EQ(out.attr.ino, 1u);
  EXPECT_EQ(out.attr.mode, S_IFREG | 0600u);
  EXPECT_EQ(out.attr.nlink, 1u);
  EXPECT_EQ(out.attr.blocks, kNullSize / 512);
  EXPECT_EQ(out.attr.uid, getuid());
}

TEST(BasicOpsTest, OpenReleaseCountHandlesAndAskForDirectIo) {
  CoreHarness harness(NullNode(), Writable());
  harness.Init();
  fuse_open_in open{O_RDWR, 0};
  Reply reply = harness.Run(RequestBytes(FUSE_OPEN, 1).Append(open).Finish());
  ASSERT_EQ(reply.result, sizeof(fuse_out_header) + sizeof(fuse_open_out));
  auto out = reply.payload<fuse_open_out>();
  EXPECT_EQ(out.open_flags, FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES);
  EXPECT_EQ(harness.session().open_handles(), 1u);

  fuse_release_in release{};
  release.fh = out.fh;
  reply = harness.Run(RequestBytes(FUSE_RELEASE, 1).Append(release).Finish());
  EXPECT_EQ(reply.result, sizeof(fuse_out_header));
  EXPECT_EQ(reply.header().error, 0);
  EXPECT_EQ(harness.session().open_handles(), 0u);
}

TEST(BasicOpsTest, ReadReturnsZeroesAndWriteReportsItsSize) {
  CoreHarness harness(NullNode(), Writable());
  harness.Init();
  Reply reply = harness.Run(ReadRequest(1, 4096, 8192));
  ASSERT_EQ(reply.result, sizeof(fuse_out_header) + 8192);
  EXPECT_EQ(reply.header().error, 0);
  EXPECT_EQ(reply.header().len, sizeof(fuse_out_header) + 8192);
  EXPECT_EQ(reply.data(), std::vector<uint8_t>(8192, 0));

  reply = harness.Run(WriteRequest(1, 0, std::vector<uint8_t>(4096, 0x11)));
  ASSERT_EQ(reply.result, sizeof(fuse_out_header) + sizeof(fuse_write_out));
  EXPECT_EQ(reply.payload<fuse_write_out>().size, 4096u);
}

TEST(BasicOpsTest, FlushAndFsyncSucceed) {
  CoreHarness harness(NullNode(), Writable());
  harness.Init();
  fuse_flush_in flush{};
  Reply reply = harness.Run(RequestBytes(FUSE_FLUSH, 1).Append(flush).Finish());
  EXPECT_EQ(reply.result, sizeof(fuse_out_header));
  EXPECT_EQ(reply.header().error, 0);
  fuse_fsync_in fsync{};
  reply = harness.Run(RequestBytes(FUSE_FSYNC, 1).Append(fsync).Finish());
  EXPECT_EQ(reply.result, sizeof(fuse_out_header));
  EXPECT_EQ(reply.header().error, 0);
}

}  // namespace
}  // namespace bexd::fuse::testing
