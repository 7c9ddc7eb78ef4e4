// SPDX-License-Identifier: GPL-2.0-or-later
// A bounded, deterministic fuzz loop: random mutations of valid requests, in random buffer
// layouts, must each complete exactly once with a well-formed reply (or a rejection), and never
// crash or touch memory outside the buffers (run under ASan to check the latter).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>

#include <random>

#include "tests/fuse/core_harness.h"

namespace bexd::fuse::testing {
namespace {

constexpr int kIterations = 20000;

std::vector<std::vector<uint8_t>> ValidRequests() {
  std::vector<std::vector<uint8_t>> corpus;
  corpus.push_back(InitRequest());
  fuse_getattr_in getattr{};
  corpus.push_back(RequestBytes(FUSE_GETATTR, 1).Append(getattr).Finish());
  fuse_setattr_in setattr{};
  setattr.valid = FATTR_MODE | FATTR_SIZE | FATTR_MTIME;
  setattr.size = 1 << 20;
  corpus.push_back(RequestBytes(FUSE_SETATTR, 1).Append(setattr).Finish());
  fuse_open_in open{O_RDWR, 0};
  corpus.push_back(RequestBytes(FUSE_OPEN, 1).Append(open).Finish());
  corpus.push_back(RequestBytes(FUSE_OPENDIR, 1).Append(open).Finish());
  fuse_release_in release{1, 0, 0, 0};
  corpus.push_back(RequestBytes(FUSE_RELEASE, 1).Append(release).Finish());
  corpus.push_back(RequestBytes(FUSE_RELEASEDIR, 1).Append(release).Finish());
  corpus.push_back(ReadRequest(1, 4096, 8192));
  corpus.push_back(WriteRequest(1, 512, std::vector<uint8_t>(3000, 0x42)));
  fuse_flush_in flush{};
  corpus.push_back(RequestBytes(FUSE_FLUSH, 1).Append(flush).Finish());
  fuse_fsync_in fsync{};
  corpus.push_back(RequestBytes(FUSE_FSYNC, 1).Append(fsync).Finish());
  fuse_fallocate_in fallocate{1, 4096, 65536, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0};
  corpus.push_back(RequestBytes(FUSE_FALLOCATE, 1).Append(fallocate).Finish());
  fuse_lseek_in lseek{1, 0, SEEK_DATA, 0};
  corpus.push_back(RequestBytes(FUSE_LSEEK, 1).Append(lseek).Finish());
  corpus.push_back(RequestBytes(FUSE_STATFS, 1).Finish());
  corpus.push_back(RequestBytes(FUSE_LOOKUP, 1).AppendString("disk.img").Finish());
  fuse_read_in readdir{2, 0, 4096, 0, 0, 0, 0};
  corpus.push_back(RequestBytes(FUSE_READDIR, 1).Append(readdir).Finish());
  corpus.push_back(RequestBytes(FUSE_READDIRPLUS, 1).Append(readdir).Finish());
  fuse_forget_in forget{1};
  corpus.push_back(RequestBytes(FUSE_FORGET, 2).Append(forget).Finish());
  fuse_batch_forget_in batch{1, 0};
  fuse_forget_one one{2, 1};
  corpus.push_back(RequestBytes(FUSE_BATCH_FORGET, 0).Append(batch).Append(one).Finish());
  fuse_interrupt_in interrupt{5};
  corpus.push_back(RequestBytes(FUSE_INTERRUPT, 0).Append(interrupt).Finish());
  corpus.push_back(RequestBytes(FUSE_DESTROY, 1).Finish());
  return corpus;
}

class Mutator {
 public:
  explicit Mutator(uint32_t seed) : random_(seed) {}

  uint64_t Below(uint64_t bound) { return bound == 0 ? 0 : random_() % bound; }

  std::vector<uint8_t> Mutate(std::vector<uint8_t> bytes) {
    const int mutations = 1 + static_cast<int>(Below(4));
    for (int i = 0; i < mutations; ++i) {
      switch (Below(6)) {
        case 0:  // flip a byte
          if (!bytes.empty()) bytes[Below(bytes.size())] ^= static_cast<uint8_t>(1 + Below(255));
          break;
        case 1:  // an interesting 32-bit value
          Store(&bytes,
                Pick({0, 1, 7, 38, 4096, 0x7fffffff, 0x80000000, 0xffffffff, (1u << 20) + 1}), 4);
          break;
        case 2:  // an interesting 64-bit value
          Store(&bytes,
                Pick({0, 1, 2, 3, uint64_t{1} << 63, ~uint64_t{0}, ~uint64_t{0} - 4095,
                      uint64_t{INT64_MAX}}),
                8);
          break;
        case 3:  // cut the request short
          bytes.resize(Below(bytes.size() + 1));
          break;
        case 4:  // add junk
          for (uint64_t n = Below(64); n > 0; --n) bytes.push_back(static_cast<uint8_t>(random_()));
          break;
        default:  // a different opcode
          Store(&bytes, Below(60), 4, offsetof(fuse_in_header, opcode));
          break;
      }
    }
    // Mostly keep the header's length true, so that mutations reach the opcode handlers.
    if (bytes.size() >= sizeof(uint32_t) && Below(4) != 0) {
      const auto len = static_cast<uint32_t>(bytes.size());
      std::memcpy(bytes.data(), &len, sizeof(len));
    }
    return bytes;
  }

  Layout RandomLayout() {
    Layout layout;
    layout.out_capacity = Below(3) == 0 ? Below(64) : Below(70000);
    layout.in_piece = Below(2) == 0 ? 0 : 1 + Below(100);
    layout.out_piece = Below(2) == 0 ? 0 : 1 + Below(5000);
    layout.out_aliases_in = Below(4) == 0;
    return layout;
  }

 private:
  uint64_t Pick(std::initializer_list<uint64_t> values) {
    return *(values.begin() + Below(values.size()));
  }
  void Store(std::vector<uint8_t>* bytes, uint64_t value, size_t width) {
    if (bytes->size() < width) return;
    Store(bytes, value, width, Below(bytes->size() - width + 1));
  }
  void Store(std::vector<uint8_t>* bytes, uint64_t value, size_t width, size_t at) {
    if (at + width > bytes->size()) return;
    std::memcpy(bytes->data() + at, &value, width);  // little endian: the low bytes
  }

  std::mt19937_64 random_;
};

void Fuzz(bool directory_root, uint32_t seed) {
  block::BlockdevOptions node;
  node.node_name = "null0";
  node.driver = block::NullOptions{8 << 20, /*read_zeroes=*/true, 0};
  SessionOptions options;
  options.writable = true;
  // Not growable: the null driver cannot be resized, so size changes take the refusal paths.
  options.directory_root = directory_root;
  options.file_name = "disk.img";
  CoreHarness harness(node, options);
  harness.Init();
  const std::vector<std::vector<uint8_t>> corpus = ValidRequests();
  Mutator mutator(seed);
  int replies = 0, rejections = 0, reinits = 0;
  for (int i = 0; i < kIterations; ++i) {
    if (!harness.session().initialized()) {
      harness.Init();
      ++reinits;
    }
    const std::vector<uint8_t> request = mutator.Mutate(corpus[mutator.Below(corpus.size())]);
    const Layout layout = mutator.RandomLayout();
    Reply reply = harness.Run(request, layout);
    ASSERT_EQ(reply.completions, 1) << "iteration " << i;
    if (reply.result > 0) {
      ++replies;
      ASSERT_GE(static_cast<size_t>(reply.result), sizeof(fuse_out_header)) << i;
      ASSERT_LE(static_cast<size_t>(reply.result), layout.out_capacity) << i;
      ASSERT_EQ(reply.header().len, reply.result) << i;
      ASSERT_LE(reply.header().error, 0) << i;
      ASSERT_GT(reply.header().error, -4096) << i;
      uint64_t unique;
      std::memcpy(&unique, request.data() + offsetof(fuse_in_header, unique), sizeof(unique));
      ASSERT_EQ(reply.header().unique, unique) << i;
    } else if (reply.result < 0) {
      ++rejections;
    }
  }
  // The loop must have reached past the header checks, not only rejected garbage.
  EXPECT_GT(replies, kIterations / 4);
  EXPECT_GT(rejections, 0);
  ::testing::Test::RecordProperty("replies", replies);
  ::testing::Test::RecordProperty("rejections", rejections);
  QueueStatsSnapshot stats = QueueStatsSnapshot::Of(harness.queue().stats());
  EXPECT_EQ(stats.requests, static_cast<uint64_t>(kIterations) + 1 + reinits);
  EXPECT_EQ(stats.in_flight, 0u);
  uint64_t timed = 0;
  for (uint64_t count : stats.latency_us) timed += count;
  EXPECT_EQ(timed, stats.requests);
}

TEST(MutationTest, FileRootSurvivesMutatedRequests) { Fuzz(false, 20240601); }

TEST(MutationTest, DirectoryRootSurvivesMutatedRequests) { Fuzz(true, 20240602); }

}  // namespace
}  // namespace bexd::fuse::testing
