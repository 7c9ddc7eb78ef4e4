// SPDX-License-Identifier: GPL-2.0-or-later
// End-to-end FUSE operations through the vhost-user-fs export, driven by the test frontend over
// the real socket protocol, with data compared against the backing file.
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fuse.h>

#include <cstring>
#include <thread>
#include <tuple>

#include "tests/vhost/export_fixture.h"

namespace bexd::test::vhost {
namespace {

struct ChainShape {
  bool indirect;
  bool two_regions;
  bool event_idx;
};

class VhostFileIoTest : public VhostExportTest, public ::testing::WithParamInterface<ChainShape> {};

FuseReply Read(Frontend& frontend, uint32_t ring, uint64_t node, uint64_t fh, uint64_t offset,
               uint32_t size) {
  struct fuse_read_in in = {};
  in.fh = fh;
  in.offset = offset;
  in.size = size;
  absl::StatusOr<FuseReply> reply = frontend.Fuse(ring, FUSE_READ, node, &in, sizeof(in), nullptr,
                                                  0, sizeof(fuse_out_header) + size);
  EXPECT_TRUE(reply.ok()) << reply.status();
  return reply.ok() ? *reply : FuseReply{};
}

FuseReply Write(Frontend& frontend, uint32_t ring, uint64_t node, uint64_t fh, uint64_t offset,
                const std::vector<unsigned char>& data) {
  struct fuse_write_in in = {};
  in.fh = fh;
  in.offset = offset;
  in.size = static_cast<uint32_t>(data.size());
  absl::StatusOr<FuseReply> reply =
      frontend.Fuse(ring, FUSE_WRITE, node, &in, sizeof(in), data.data(), data.size());
  EXPECT_TRUE(reply.ok()) << reply.status();
  return reply.ok() ? *reply : FuseReply{};
}

TEST_P(VhostFileIoTest, InitLookupOpenReadWriteFsyncFallocate) {
  StartExport(1);
  FrontendOptions options = Options();
  options.indirect = GetParam().indirect;
  options.two_regions = GetParam().two_regions;
  options.event_idx = GetParam().event_idx;
  std::unique_ptr<Frontend> frontend = ConnectAndInit(options);
  ASSERT_NE(frontend, nullptr);

  uint64_t node = LookupImage(*frontend);
  ASSERT_EQ(node, 2u);
  uint64_t fh = OpenImage(*frontend, node);

  // READ: data lands in guest memory straight from the file.
  FuseReply read = Read(*frontend, 1, node, fh, 12345, 100000);
  ASSERT_EQ(read.header.error, 0);
  ASSERT_EQ(read.payload.size(), 100000u);
  EXPECT_EQ(read.written, sizeof(fuse_out_header) + 100000);
  EXPECT_TRUE(std::equal(read.payload.begin(), read.payload.end(), pattern_.begin() + 12345));

  // WRITE: data goes from guest memory to the file.
  std::vector<unsigned char> data(64 * 1024 + 7);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 3);
  FuseReply write = Write(*frontend, 1, node, fh, 1 << 20, data);
  ASSERT_EQ(write.header.error, 0);
  struct fuse_write_out write_out = {};
  memcpy(&write_out, write.payload.data(), sizeof(write_out));
  EXPECT_EQ(write_out.size, data.size());
  EXPECT_EQ(ReadBacking(1 << 20, data.size()), data);
  FuseReply reread = Read(*frontend, 1, node, fh, 1 << 20, static_cast<uint32_t>(data.size()));
  EXPECT_EQ(reread.payload, data);

  struct fuse_fsync_in fsync_in = {};
  fsync_in.fh = fh;
  absl::StatusOr<FuseReply> fsync =
      frontend->Fuse(1, FUSE_FSYNC, node, &fsync_in, sizeof(fsync_in));
  ASSERT_TRUE(fsync.ok()) << fsync.status();
  EXPECT_EQ(fsync->header.error, 0);

  // FALLOCATE punching a hole: the range reads back as zeroes, in the file too.
  struct fuse_fallocate_in falloc = {};
  falloc.fh = fh;
  falloc.offset = 8192;
  falloc.length = 16384;
  falloc.mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
  absl::StatusOr<FuseReply> punched =
      frontend->Fuse(1, FUSE_FALLOCATE, node, &falloc, sizeof(falloc));
  ASSERT_TRUE(punched.ok()) << punched.status();
  EXPECT_EQ(punched->header.error, 0);
  EXPECT_EQ(ReadBacking(8192, 16384), std::vector<unsigned char>(16384, 0));
  FuseReply zeroes = Read(*frontend, 1, node, fh, 8192, 16384);
  EXPECT_EQ(zeroes.payload, std::vector<unsigned char>(16384, 0));
  EXPECT_EQ(ReadBacking(8192 + 16384, 4096),
            std::vector<unsigned char>(pattern_.begin() + 8192 + 16384,
                                       pattern_.begin() + 8192 + 16384 + 4096));

  struct fuse_release_in release = {};
  release.fh = fh;
  absl::StatusOr<FuseReply> released =
      frontend->Fuse(1, FUSE_RELEASE, node, &release, sizeof(release));
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(released->header.error, 0);
}

INSTANTIATE_TEST_SUITE_P(Chains, VhostFileIoTest,
                         ::testing::Values(ChainShape{false, false, true},
                                           ChainShape{true, false, true},
                                           ChainShape{false, true, true},
                                           ChainShape{true, true, false}),
                         [](const ::testing::TestParamInfo<ChainShape>& info) {
                           return std::string(info.param.indirect ? "Indirect" : "Direct") +
                                  (info.param.two_regions ? "TwoRegions" : "OneRegion") +
                                  (info.param.event_idx ? "EventIdx" : "NoEventIdx");
                         });

// Several request queues at once, each with many requests in flight, from two threads.
TEST_F(VhostExportTest, ParallelRequestQueues) {
  StartExport(2);
  std::unique_ptr<Frontend> frontend = ConnectAndInit(Options(2));
  ASSERT_NE(frontend, nullptr);
  uint64_t node = LookupImage(*frontend);
  uint64_t fh = OpenImage(*frontend, node);

  auto reader = [&](uint32_t ring) {
    constexpr uint32_t kSize = 4096;
    for (int round = 0; round < 20; ++round) {
      std::vector<uint64_t> offsets;
      for (int i = 0; i < 16; ++i) {
        struct fuse_read_in in = {};
        in.fh = fh;
        in.offset = (uint64_t{ring} * 977 + round * 131 + i * 17) * 4096 % (kImageSize - kSize);
        in.size = kSize;
        absl::StatusOr<int> slot = frontend->Submit(ring, FUSE_READ, node, &in, sizeof(in), nullptr,
                                                    0, sizeof(fuse_out_header) + kSize);
        ASSERT_TRUE(slot.ok()) << slot.status();
        offsets.resize(std::max<size_t>(offsets.size(), *slot + 1));
        offsets[*slot] = in.offset;
      }
      int done = 0;
      while (done < 16) {
        absl::StatusOr<std::vector<Completion>> completions = frontend->WaitCompletions(ring);
        ASSERT_TRUE(completions.ok()) << completions.status();
        for (const Completion& c : *completions) {
          FuseReply reply = frontend->ReplyOf(ring, c);
          ASSERT_EQ(reply.header.error, 0);
          ASSERT_EQ(reply.payload.size(), kSize);
          ASSERT_TRUE(std::equal(reply.payload.begin(), reply.payload.end(),
                                 pattern_.begin() + offsets[c.slot]));
          ++done;
        }
      }
    }
  };
  std::thread first(reader, 1);
  std::thread second(reader, 2);
  first.join();
  second.join();

  std::vector<fuse::QueueStatsSnapshot> stats = export_->Stats();
  ASSERT_EQ(stats.size(), 3u);  // hiprio + 2 request queues
  EXPECT_GE(stats[1].read_requests, 320u);
  EXPECT_GE(stats[2].read_requests, 320u);
}

// FORGET on the hiprio queue takes no reply; the chain still comes back on the used ring.
TEST_F(VhostExportTest, ForgetOnHiprioQueue) {
  StartExport(1);
  std::unique_ptr<Frontend> frontend = ConnectAndInit(Options());
  ASSERT_NE(frontend, nullptr);
  uint64_t node = LookupImage(*frontend);
  struct fuse_forget_in forget = {};
  forget.nlookup = 1;
  absl::StatusOr<FuseReply> reply =
      frontend->Fuse(0, FUSE_FORGET, node, &forget, sizeof(forget), nullptr, 0, 0);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->written, 0u);
  EXPECT_EQ(LookupImage(*frontend), 2u);
}

// The hiprio queue has no IoQueue of its own (no libaio context, no worker threads): a guest that
// sends READ there gets EIO, while the request queue serves the same READ from the image.
TEST_F(VhostExportTest, HiprioQueueServesNoBlockIo) {
  StartExport(1);
  std::unique_ptr<Frontend> frontend = ConnectAndInit(Options());
  ASSERT_NE(frontend, nullptr);
  uint64_t node = LookupImage(*frontend);
  uint64_t fh = OpenImage(*frontend, node);
  FuseReply refused = Read(*frontend, 0, node, fh, 0, 4096);
  EXPECT_EQ(refused.header.error, -EIO);
  FuseReply served = Read(*frontend, 1, node, fh, 0, 4096);
  ASSERT_EQ(served.header.error, 0);
  EXPECT_EQ(served.payload, ReadBacking(0, 4096));
}

}  // namespace
}  // namespace bexd::test::vhost
