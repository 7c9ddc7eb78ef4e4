// SPDX-License-Identifier: GPL-2.0-or-later
// The file driver's other operations: discard, write-zeroes, block status, resizing, and
// concurrent partial-block writes under O_DIRECT.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::Outcome;
using testing::Pattern;
using testing::Prepare;
using testing::ReadAt;
using testing::RunOne;
using testing::WaitIdle;
using testing::WriteAt;

off_t SeekHole(const std::string& path, off_t from) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  off_t hole = lseek(fd, from, SEEK_HOLE);
  close(fd);
  return hole;
}

class FileOpsTest : public ::testing::TestWithParam<AioMode> {
 protected:
  testing::ScratchDir dir_;
};

TEST_P(FileOpsTest, DiscardUnmapPunchesAHole) {
  std::string path = dir_.CreateFile("image", 1 << 20);
  testing::WriteFile(path, Pattern(1 << 20, 1), 0);
  ASSERT_EQ(SeekHole(path, 0), 1 << 20) << "the file should start fully allocated";
  auto node = testing::OpenFileOrFail(path, GetParam(), true, DiscardMode::kUnmap);
  auto queue = testing::MakeQueue(*node);
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 256 * 1024, 512 * 1024), 512 * 1024);
  EXPECT_EQ(SeekHole(path, 0), 256 * 1024);
  std::vector<unsigned char> back = testing::ReadFile(path, 0, 1 << 20);
  std::vector<unsigned char> expected = Pattern(1 << 20, 1);
  std::memset(expected.data() + 256 * 1024, 0, 512 * 1024);
  EXPECT_EQ(back, expected);
  EXPECT_EQ(testing::FileSize(path), 1u << 20);
}

TEST_P(FileOpsTest, DiscardIgnoreKeepsData) {
  std::string path = dir_.CreateFile("image", 1 << 20);
  testing::WriteFile(path, Pattern(1 << 20, 2), 0);
  auto node = testing::OpenFileOrFail(path, GetParam(), false, DiscardMode::kIgnore);
  auto queue = testing::MakeQueue(*node);
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 0, 1 << 20), 1 << 20);
  EXPECT_EQ(testing::ReadFile(path, 0, 1 << 20), Pattern(1 << 20, 2));
}

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST_P(FileOpsTest, AllocateReservesStorageAndKeepsData) {
  std::string path = dir_.CreateFile("image", 4 << 20);
  testing::WriteFile(path, Pattern(65536, 4), 1 << 20);
  const uint64_t before = AllocatedBytes(path);
  auto node = testing::OpenFileOrFail(path, GetParam(), true, DiscardMode::kIgnore);
  auto queue = testing::MakeQueue(*node);
  EXPECT_EQ(RunOne(*queue, IoOp::kAllocate, 0, 3 << 20), 3 << 20);
  EXPECT_GE(AllocatedBytes(path), before + (3 << 20) - 65536);
  EXPECT_EQ(testing::ReadFile(path, 1 << 20, 65536), Pattern(65536, 4));
  EXPECT_EQ(testing::FileSize(path), 4u << 20);
  // Past the end is refused like any other range.
  EXPECT_EQ(RunOne(*queue, IoOp::kAllocate, 4 << 20, 4096), -EINVAL);
}

TEST_P(FileOpsTest, WriteZeroes) {
  for (bool direct : {true, false}) {
    for (uint32_t flags : {0u, uint32_t{kIoMayUnmap}}) {
      std::string path = dir_.CreateFile("image", 1 << 20);
      testing::WriteFile(path, Pattern(1 << 20, 3), 0);
      auto node = testing::OpenFileOrFail(path, GetParam(), direct, DiscardMode::kUnmap);
      auto queue = testing::MakeQueue(*node);
      std::vector<unsigned char> expected = Pattern(1 << 20, 3);
      // Aligned, then a range that starts and ends inside blocks.
      EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 65536, 131072, nullptr, 0, flags), 131072);
      std::memset(expected.data() + 65536, 0, 131072);
      EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 300001, 70001, nullptr, 0, flags), 70001);
      std::memset(expected.data() + 300001, 0, 70001);
      EXPECT_EQ(testing::ReadFile(path, 0, 1 << 20), expected)
          << "direct " << direct << " flags " << flags;
      std::vector<unsigned char> back(1 << 20);
      EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 0), 1 << 20);
      EXPECT_EQ(back, expected);
    }
  }
}

TEST_P(FileOpsTest, BlockStatusOnSparseFile) {
  constexpr uint64_t kMiB = 1 << 20;
  std::string path = dir_.CreateFile("image", 4 * kMiB);
  testing::WriteFile(path, Pattern(65536, 4), kMiB);
  auto node = testing::OpenFileOrFail(path, GetParam(), true, DiscardMode::kUnmap);
  auto queue = testing::MakeQueue(*node);
  bool data = true;
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 0, 4 * kMiB, nullptr, 0, 0, &data), kMiB);
  EXPECT_FALSE(data);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 4096, 4 * kMiB, nullptr, 0, 0, &data), kMiB - 4096);
  EXPECT_FALSE(data);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, kMiB, 4 * kMiB, nullptr, 0, 0, &data), 65536);
  EXPECT_TRUE(data);
  // Capped at the requested length.
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, kMiB, 512, nullptr, 0, 0, &data), 512);
  EXPECT_TRUE(data);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, kMiB + 65536, 8 * kMiB, nullptr, 0, 0, &data),
            3 * kMiB - 65536);
  EXPECT_FALSE(data);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 4 * kMiB, 4096), 0);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 5 * kMiB, 4096), 0);
}

TEST_P(FileOpsTest, TruncateGrowsAndShrinks) {
  std::string path = dir_.CreateFile("image", 1 << 20);
  testing::WriteFile(path, Pattern(1 << 20, 5), 0);
  auto node = testing::OpenFileOrFail(path, GetParam(), true, DiscardMode::kUnmap);
  auto queue = testing::MakeQueue(*node);
  ASSERT_TRUE(node->Truncate(3 << 20).ok());
  EXPECT_EQ(node->size(), 3u << 20);
  EXPECT_EQ(testing::FileSize(path), 3u << 20);
  std::vector<unsigned char> back(4096, 0xee);
  EXPECT_EQ(ReadAt(*queue, back.data(), 4096, (3 << 20) - 4096), 4096);
  EXPECT_EQ(back, std::vector<unsigned char>(4096, 0));
  std::vector<unsigned char> pattern = Pattern(4096, 6);
  EXPECT_EQ(WriteAt(*queue, pattern.data(), 4096, (2 << 20) + 4096), 4096);

  ASSERT_TRUE(node->Truncate(512 * 1024 + 100).ok());
  EXPECT_EQ(node->size(), 512u * 1024 + 100);
  EXPECT_EQ(testing::FileSize(path), 512u * 1024 + 100);
  EXPECT_EQ(ReadAt(*queue, back.data(), 4096, 1 << 20), -EINVAL);
  EXPECT_EQ(ReadAt(*queue, back.data(), 100, 512 * 1024), 100);
  std::vector<unsigned char> original = Pattern(1 << 20, 5);
  EXPECT_EQ(std::memcmp(back.data(), original.data() + 512 * 1024, 100), 0);
}

// A write accepted before a shrink may land after it and extend the file again; when it
// completes, the file is cut back to the node's size, so neither a reopen nor a later grow brings
// its bytes back. The truncate runs while a 16 MiB write past the new end is still in flight.
TEST_P(FileOpsTest, AWriteLandingAfterAShrinkDoesNotGrowTheFileBack) {
  constexpr uint64_t kImage = 64 << 20, kShrunk = 4 << 20, kLength = 16 << 20;
  std::string path = dir_.CreateFile("image", kImage);
  auto node = testing::OpenFileOrFail(path, GetParam(), false, DiscardMode::kUnmap);
  auto queue = testing::MakeQueue(*node);
  std::vector<unsigned char> data = Pattern(kLength, 9);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(node->Truncate(kImage).ok());
    struct iovec iov = {data.data(), data.size()};
    IoRequest request;
    Outcome outcome;
    Prepare(&request, &outcome, IoOp::kWrite, 32 << 20, kLength, &iov, 1);
    queue->Submit(&request);
    queue->Poll();  // hands it to libaio, the ring or a worker
    ASSERT_TRUE(node->Truncate(kShrunk).ok());
    ASSERT_TRUE(WaitIdle(*queue));
    ASSERT_TRUE(outcome.done);
    EXPECT_EQ(node->size(), kShrunk);
    EXPECT_EQ(testing::FileSize(path), kShrunk)
        << "round " << round << ", write result " << outcome.result;
  }
  ASSERT_TRUE(node->Truncate(kImage).ok());
  std::vector<unsigned char> back(4096, 0xee);
  EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 32 << 20), 4096);
  EXPECT_EQ(back, std::vector<unsigned char>(4096, 0));
}

// Two threads, each with its own queue, write disjoint byte ranges that share every 512-byte
// block, many at once and repeatedly; read-modify-write must not let one undo the other.
TEST_P(FileOpsTest, ConcurrentPartialBlockWritesLoseNothing) {
  constexpr int kBlocks = 64;
  constexpr size_t kBlock = 4096;
  constexpr size_t kPiece = 150;
  constexpr int kRounds = 20;
  std::string path = dir_.CreateFile("image", kBlocks * kBlock);
  auto node = testing::OpenFileOrFail(path, GetParam(), true, DiscardMode::kUnmap);
  ASSERT_GT(node->request_alignment(), 1u) << "O_DIRECT should need aligned requests";
  auto piece_offset = [](int thread, int block) { return block * kBlock + 7 + thread * kPiece; };
  auto piece_data = [](int thread, int round, int block) {
    return Pattern(kPiece, (thread * 1000 + round) * 100 + block);
  };
  // One byte per thread: std::vector<bool> would pack both flags into one word.
  std::vector<char> ok(2, 0);
  auto writer = [&](int thread) {
    auto queue = node->CreateQueue();
    if (!queue.ok()) return;
    std::vector<IoRequest> requests(kBlocks);
    std::vector<Outcome> outcomes(kBlocks);
    std::vector<std::vector<unsigned char>> data(kBlocks);
    std::vector<struct iovec> iov(kBlocks);
    for (int round = 0; round < kRounds; ++round) {
      for (int block = 0; block < kBlocks; ++block) {
        data[block] = piece_data(thread, round, block);
        iov[block] = {data[block].data(), kPiece};
        Prepare(&requests[block], &outcomes[block], IoOp::kWrite, piece_offset(thread, block),
                kPiece, &iov[block], 1);
        (*queue)->Submit(&requests[block]);
      }
      if (!WaitIdle(**queue)) return;
      for (const Outcome& outcome : outcomes) {
        if (outcome.result != static_cast<int64_t>(kPiece)) return;
      }
    }
    ok[thread] = 1;
  };
  std::thread first(writer, 0), second(writer, 1);
  first.join();
  second.join();
  ASSERT_EQ(ok, std::vector<char>(2, 1));
  std::vector<unsigned char> file = testing::ReadFile(path, 0, kBlocks * kBlock);
  for (int block = 0; block < kBlocks; ++block) {
    for (int thread = 0; thread < 2; ++thread) {
      std::vector<unsigned char> expected = piece_data(thread, kRounds - 1, block);
      ASSERT_EQ(std::memcmp(file.data() + piece_offset(thread, block), expected.data(), kPiece), 0)
          << "block " << block << " thread " << thread;
    }
    EXPECT_EQ(file[block * kBlock], 0);
    EXPECT_EQ(file[piece_offset(1, block) + kPiece], 0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllAio, FileOpsTest, ::testing::ValuesIn(testing::kAllAioModes),
                         [](const ::testing::TestParamInfo<AioMode>& info) {
                           return testing::AioTestName(info.param);
                         });

}  // namespace
}  // namespace bexd::block
