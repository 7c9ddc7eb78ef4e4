// SPDX-License-Identifier: GPL-2.0-or-later
// The raw driver over a real file: offset and size checked against the child at open, every
// operation handed to the child's queue at the shifted offset (checked in the file itself), the
// window's ends enforced, read-only, and resizing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "block/null_node.h"
#include "block/raw_node.h"
#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::Outcome;
using testing::Pattern;
using testing::Prepare;
using testing::ReadAt;
using testing::RunOne;
using testing::WriteAt;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kOffset = kMiB;
constexpr uint64_t kSize = 2 * kMiB;

std::shared_ptr<RawNode> OpenRawOrFail(std::shared_ptr<BlockNode> file, RawOptions options,
                                       bool read_only = false) {
  auto raw = RawNode::Open("raw0", options, read_only, std::move(file));
  EXPECT_TRUE(raw.ok()) << raw.status();
  return raw.ok() ? *raw : nullptr;
}

off_t Seek(const std::string& path, off_t from, int whence) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  off_t result = lseek(fd, from, whence);
  close(fd);
  return result;
}

TEST(RawOpenTest, OffsetAndSizeMustLieWithinTheChild) {
  testing::ScratchDir dir;
  std::string path = dir.CreateFile("image", kMiB);
  auto file = testing::OpenFileOrFail(path, AioMode::kThreads, false);

  auto past = RawNode::Open("raw0", RawOptions{.offset = 2 * kMiB}, false, file);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().message(),
            "node 'raw0': offset 2097152 is past the end of its file child 'disk0' (1048576 "
            "bytes)");
  auto sum = RawNode::Open("raw0", RawOptions{.offset = kMiB / 2, .size = kMiB}, false, file);
  ASSERT_FALSE(sum.ok());
  EXPECT_EQ(sum.status().message(),
            "node 'raw0': offset 524288 plus size 1048576 is past the end of its file child "
            "'disk0' (1048576 bytes)");
  // An overflowing sum is past the end too.
  EXPECT_FALSE(
      RawNode::Open("raw0", RawOptions{.offset = 4096, .size = UINT64_MAX}, false, file).ok());

  // Exactly up to the end, an empty window at the end, and byte offsets without O_DIRECT.
  auto whole = OpenRawOrFail(file, RawOptions{.offset = kMiB / 2, .size = kMiB / 2});
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->size(), kMiB / 2);
  auto empty = OpenRawOrFail(file, RawOptions{.offset = kMiB});
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->size(), 0u);
  auto odd = OpenRawOrFail(file, RawOptions{.offset = 1, .size = 3});
  ASSERT_NE(odd, nullptr);
  EXPECT_EQ(odd->size(), 3u);
  EXPECT_EQ(odd->request_alignment(), 1u);
}

// A window that breaks the child's alignment (a partition at sector 63 of a disk with 4 KiB
// sectors) works, as in QEMU: the child bounces its requests through whole blocks.
TEST(RawOpenTest, AWindowNotAlignedForADirectChildWorks) {
  testing::ScratchDir dir;
  std::string path = dir.CreateFile("image", kMiB);
  testing::WriteFile(path, Pattern(kMiB, 3), 0);
  auto file = testing::OpenFileOrFail(path, AioMode::kNative, /*direct=*/true);
  ASSERT_NE(file, nullptr);
  const uint32_t alignment = file->request_alignment();
  ASSERT_GT(alignment, 1u);

  const uint64_t offset = 63 * 512 + alignment / 2;
  auto raw = OpenRawOrFail(file, RawOptions{.offset = offset, .size = 100000});
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(raw->request_alignment(), 1u);
  auto queue = testing::MakeQueue(*raw);
  ASSERT_NE(queue, nullptr);
  std::vector<unsigned char> expected = Pattern(kMiB, 3);
  std::vector<unsigned char> data = Pattern(3000, 4);
  ASSERT_EQ(WriteAt(*queue, data.data(), data.size(), 3000), 3000);
  std::copy(data.begin(), data.end(), expected.begin() + offset + 3000);
  EXPECT_EQ(testing::ReadFile(path, 0, kMiB), expected);
  std::vector<unsigned char> back(100000);
  ASSERT_EQ(ReadAt(*queue, back.data(), back.size(), 0), 100000);
  EXPECT_EQ(back, std::vector<unsigned char>(expected.begin() + offset,
                                             expected.begin() + offset + 100000));

  auto aligned = OpenRawOrFail(file, RawOptions{.offset = alignment, .size = 4 * alignment});
  ASSERT_NE(aligned, nullptr);
  EXPECT_EQ(aligned->request_alignment(), alignment);
}

class RawIoTest : public ::testing::TestWithParam<std::tuple<AioMode, bool>> {
 protected:
  void SetUp() override {
    path_ = dir_.CreateFile("image", 4 * kMiB);
    testing::WriteFile(path_, Pattern(4 * kMiB, 7), 0);
    file_ = testing::OpenFileOrFail(path_, std::get<0>(GetParam()), std::get<1>(GetParam()),
                                    DiscardMode::kUnmap);
    ASSERT_NE(file_, nullptr);
    raw_ = OpenRawOrFail(
        file_, RawOptions{.offset = kOffset, .size = kSize, .discard = DiscardMode::kUnmap});
    ASSERT_NE(raw_, nullptr);
    queue_ = testing::MakeQueue(*raw_);
    ASSERT_NE(queue_, nullptr);
    expected_ = Pattern(4 * kMiB, 7);
  }

  // The file outside the window must never change.
  void ExpectFileIsExpected() { EXPECT_EQ(testing::ReadFile(path_, 0, 4 * kMiB), expected_); }

  testing::ScratchDir dir_;
  std::string path_;
  std::shared_ptr<BlockNode> file_;
  std::shared_ptr<RawNode> raw_;
  std::unique_ptr<IoQueue> queue_;
  std::vector<unsigned char> expected_;
};

TEST_P(RawIoTest, ReadsAndWritesLandAtTheOffset) {
  EXPECT_EQ(raw_->size(), kSize);
  std::vector<unsigned char> back(65536);
  ASSERT_EQ(ReadAt(*queue_, back.data(), back.size(), 0), 65536);
  EXPECT_EQ(back, std::vector<unsigned char>(expected_.begin() + kOffset,
                                             expected_.begin() + kOffset + 65536));

  std::vector<unsigned char> data = Pattern(65536, 8);
  ASSERT_EQ(WriteAt(*queue_, data.data(), data.size(), 4096), 65536);
  std::copy(data.begin(), data.end(), expected_.begin() + kOffset + 4096);
  std::vector<unsigned char> last = Pattern(4096, 9);
  ASSERT_EQ(WriteAt(*queue_, last.data(), last.size(), kSize - 4096, kIoFua), 4096);
  std::copy(last.begin(), last.end(), expected_.begin() + kOffset + kSize - 4096);
  EXPECT_EQ(RunOne(*queue_, IoOp::kFlush, 0, 0), 0);
  ExpectFileIsExpected();
  ASSERT_EQ(ReadAt(*queue_, back.data(), back.size(), 4096), 65536);
  EXPECT_EQ(back, data);
}

TEST_P(RawIoTest, RequestsPastTheWindowAreRefused) {
  std::vector<unsigned char> data = Pattern(8192, 10);
  EXPECT_EQ(WriteAt(*queue_, data.data(), data.size(), kSize - 4096), -EINVAL);
  EXPECT_EQ(ReadAt(*queue_, data.data(), data.size(), kSize - 4096), -EINVAL);
  EXPECT_EQ(ReadAt(*queue_, data.data(), 4096, kSize), -EINVAL);
  EXPECT_EQ(RunOne(*queue_, IoOp::kWriteZeroes, kSize, 4096), -EINVAL);
  EXPECT_EQ(RunOne(*queue_, IoOp::kDiscard, kSize - 4096, 8192), -EINVAL);
  EXPECT_EQ(RunOne(*queue_, IoOp::kAllocate, 0, kSize + 4096), -EINVAL);
  ExpectFileIsExpected();
}

TEST_P(RawIoTest, WriteZeroesDiscardAndAllocateLandAtTheOffset) {
  EXPECT_EQ(RunOne(*queue_, IoOp::kWriteZeroes, 8192, 8192), 8192);
  std::memset(expected_.data() + kOffset + 8192, 0, 8192);
  EXPECT_EQ(RunOne(*queue_, IoOp::kWriteZeroes, 65536, 65536, nullptr, 0, kIoMayUnmap), 65536);
  std::memset(expected_.data() + kOffset + 65536, 0, 65536);
  ExpectFileIsExpected();

  EXPECT_EQ(RunOne(*queue_, IoOp::kDiscard, 256 * 1024, 256 * 1024), 256 * 1024);
  std::memset(expected_.data() + kOffset + 256 * 1024, 0, 256 * 1024);
  ExpectFileIsExpected();
  // The hole is in the file at the shifted offset (discard=unmap on both nodes).
  EXPECT_EQ(Seek(path_, kOffset + 200 * 1024, SEEK_HOLE), off_t(kOffset + 256 * 1024));

  EXPECT_EQ(RunOne(*queue_, IoOp::kAllocate, 256 * 1024, 64 * 1024), 64 * 1024);
  EXPECT_EQ(Seek(path_, kOffset + 256 * 1024, SEEK_DATA), off_t(kOffset + 256 * 1024));
  ExpectFileIsExpected();
}

TEST_P(RawIoTest, BlockStatusIsTheChildsAtTheOffsetCutAtTheEnd) {
  ASSERT_EQ(RunOne(*queue_, IoOp::kDiscard, 512 * 1024, 512 * 1024), 512 * 1024);
  bool data = false;
  EXPECT_EQ(RunOne(*queue_, IoOp::kBlockStatus, 0, kSize, nullptr, 0, 0, &data), 512 * 1024);
  EXPECT_TRUE(data);
  EXPECT_EQ(RunOne(*queue_, IoOp::kBlockStatus, 512 * 1024, kSize, nullptr, 0, 0, &data),
            512 * 1024);
  EXPECT_FALSE(data);
  // The file has data past the window; the extent still ends with the node.
  EXPECT_EQ(RunOne(*queue_, IoOp::kBlockStatus, kSize - 4096, kMiB, nullptr, 0, 0, &data), 4096);
  EXPECT_TRUE(data);
  EXPECT_EQ(RunOne(*queue_, IoOp::kBlockStatus, kSize, 4096), 0);
}

TEST_P(RawIoTest, DiscardIgnoreKeepsTheData) {
  auto ignoring = OpenRawOrFail(file_, RawOptions{.offset = kOffset, .size = kSize});
  ASSERT_NE(ignoring, nullptr);
  auto queue = testing::MakeQueue(*ignoring);
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 0, kSize), int64_t(kSize));
  // With discard=ignore write-zeroes may not unmap, but still zeroes.
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 0, 4096, nullptr, 0, kIoMayUnmap), 4096);
  std::memset(expected_.data() + kOffset, 0, 4096);
  ExpectFileIsExpected();
}

INSTANTIATE_TEST_SUITE_P(AioAndCache, RawIoTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kAllAioModes),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<AioMode, bool>>& info) {
                           return testing::AioTestName(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "Direct" : "Cached");
                         });

class RawNodeTest : public ::testing::Test {
 protected:
  testing::ScratchDir dir_;
  const std::string path_ = dir_.CreateFile("image", kMiB);
};

TEST_F(RawNodeTest, ReadOnlyNodeRefusesModifyingOps) {
  const std::string& path = path_;
  testing::WriteFile(path, Pattern(kMiB, 11), 0);
  auto file = testing::OpenFileOrFail(path, AioMode::kThreads, false, DiscardMode::kUnmap);
  auto raw = OpenRawOrFail(file, RawOptions{.offset = 4096, .discard = DiscardMode::kUnmap},
                           /*read_only=*/true);
  ASSERT_NE(raw, nullptr);
  EXPECT_TRUE(raw->read_only());
  auto queue = testing::MakeQueue(*raw);
  std::vector<unsigned char> data(4096);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 0), -EROFS);
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 0, 4096), -EROFS);
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 0, 4096), -EROFS);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  ASSERT_EQ(ReadAt(*queue, data.data(), data.size(), 0), 4096);
  std::vector<unsigned char> pattern = Pattern(kMiB, 11);
  EXPECT_EQ(data, std::vector<unsigned char>(pattern.begin() + 4096, pattern.begin() + 8192));
  EXPECT_EQ(testing::ReadFile(path, 0, kMiB), pattern);
  EXPECT_FALSE(raw->Truncate(2 * kMiB).ok());

  // Read-only because its child is: the same refusals.
  const std::string other = dir_.CreateFile("other", kMiB);
  auto read_only_file =
      testing::OpenFile(FileOptions{.filename = other}, /*read_only=*/true, "ro0");
  ASSERT_TRUE(read_only_file.ok()) << read_only_file.status();
  auto over_read_only = OpenRawOrFail(*read_only_file, RawOptions{});
  ASSERT_NE(over_read_only, nullptr);
  EXPECT_TRUE(over_read_only->read_only());
  auto child_queue = testing::MakeQueue(*over_read_only);
  EXPECT_EQ(WriteAt(*child_queue, data.data(), data.size(), 0), -EROFS);
  EXPECT_EQ(testing::ReadFile(other, 0, kMiB), std::vector<unsigned char>(kMiB, 0));
}

TEST_F(RawNodeTest, ResizingGoesToTheChildUnlessTheSizeIsFixed) {
  const std::string& path = path_;
  auto file = testing::OpenFileOrFail(path, AioMode::kThreads, false);
  auto growing = OpenRawOrFail(file, RawOptions{.offset = 65536});
  ASSERT_NE(growing, nullptr);
  EXPECT_EQ(growing->size(), kMiB - 65536);
  ASSERT_TRUE(growing->Truncate(3 * kMiB).ok());
  EXPECT_EQ(testing::FileSize(path), 3 * kMiB + 65536);
  EXPECT_EQ(growing->size(), 3 * kMiB);
  EXPECT_EQ(file->size(), 3 * kMiB + 65536);

  auto fixed = OpenRawOrFail(file, RawOptions{.offset = 65536, .size = kMiB});
  ASSERT_NE(fixed, nullptr);
  absl::Status status = fixed->Truncate(2 * kMiB);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(status.message(),
            "node 'raw0': cannot resize: its size is fixed (size=1048576 was "
            "given)");
  EXPECT_EQ(testing::FileSize(path), 3 * kMiB + 65536);

  // A child cut below the window leaves an empty node, never a wrapped-around size.
  ASSERT_TRUE(file->Truncate(32768).ok());
  EXPECT_EQ(growing->size(), 0u);
  EXPECT_EQ(fixed->size(), 0u);
}

// The child's capabilities, less what the raw node's options take away.
TEST_F(RawNodeTest, CapabilitiesAreTheChildsLessWhatTheOptionsForbid) {
  auto unmapping = testing::OpenFileOrFail(path_, AioMode::kThreads, false, DiscardMode::kUnmap);
  ASSERT_TRUE(unmapping->capabilities().discard);
  auto passes_discards = OpenRawOrFail(unmapping, RawOptions{.discard = DiscardMode::kUnmap});
  auto drops_discards = OpenRawOrFail(unmapping, RawOptions{.discard = DiscardMode::kIgnore});
  ASSERT_NE(passes_discards, nullptr);
  ASSERT_NE(drops_discards, nullptr);
  EXPECT_TRUE(passes_discards->capabilities().discard);
  EXPECT_FALSE(drops_discards->capabilities().discard);
  for (const auto& raw : {passes_discards, drops_discards}) {
    const Capabilities capabilities = raw->capabilities();
    EXPECT_TRUE(capabilities.write_zeroes);
    EXPECT_TRUE(capabilities.block_status);
    EXPECT_TRUE(capabilities.flush);
    EXPECT_TRUE(capabilities.fua);
    EXPECT_TRUE(capabilities.resize);
  }
  unmapping.reset();
  passes_discards.reset();
  drops_discards.reset();

  // A fixed size, or a read-only node, cannot change size; neither can a node whose child
  // cannot (null).
  auto file = testing::OpenFileOrFail(path_, AioMode::kThreads, false);
  EXPECT_FALSE(OpenRawOrFail(file, RawOptions{.size = 65536})->capabilities().resize);
  EXPECT_FALSE(OpenRawOrFail(file, RawOptions{}, /*read_only=*/true)->capabilities().resize);
  auto null = OpenNullNode("null0", NullOptions{.size = kMiB}, false);
  ASSERT_TRUE(null.ok());
  const Capabilities over_null = OpenRawOrFail(*null, RawOptions{})->capabilities();
  EXPECT_FALSE(over_null.resize);
  EXPECT_FALSE(over_null.flush);
  EXPECT_FALSE(over_null.discard);
}

struct Resubmitter {
  IoQueue* queue = nullptr;
  int completions = 0;
  int64_t last_result = 0;
};

void SubmitAgain(IoRequest* request, int64_t result) {
  auto* resubmitter = static_cast<Resubmitter*>(request->opaque);
  resubmitter->last_result = result;
  // Past the end again: refused by the raw queue itself, submitted from within its Poll().
  if (++resubmitter->completions < 5) resubmitter->queue->Submit(request);
}

TEST_F(RawNodeTest, RefusedRequestsACallbackSubmitsCompleteWithinTheSamePoll) {
  auto file = testing::OpenFileOrFail(path_, AioMode::kNative, false);
  auto raw = OpenRawOrFail(file, RawOptions{.offset = 4096});
  ASSERT_NE(raw, nullptr);
  auto queue = testing::MakeQueue(*raw);
  ASSERT_GE(queue->event_fd(), 0);  // the file queue's: nothing would wake a waiter for these

  std::vector<unsigned char> buffer(4096);
  struct iovec iov = {buffer.data(), buffer.size()};
  Resubmitter resubmitter{.queue = queue.get()};
  IoRequest request;
  Outcome unused;
  Prepare(&request, &unused, IoOp::kRead, kMiB, buffer.size(), &iov, 1);
  request.done = SubmitAgain;
  request.opaque = &resubmitter;
  queue->Submit(&request);
  EXPECT_EQ(resubmitter.completions, 0) << "completed inside Submit()";
  EXPECT_EQ(queue->in_flight(), 1u);
  queue->Poll();
  EXPECT_EQ(resubmitter.completions, 5);
  EXPECT_EQ(resubmitter.last_result, -EINVAL);
  EXPECT_EQ(queue->in_flight(), 0u);
}

}  // namespace
}  // namespace bexd::block
