// SPDX-License-Identifier: GPL-2.0-or-later
// Reads and writes through the file driver in every aio/cache.direct combination, checked
// against the file's bytes as a plain descriptor sees them.
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
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

// Page-aligned memory; offsets into it make deliberately misaligned buffers.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t size) : size_(size) {
    void* memory = nullptr;
    EXPECT_EQ(posix_memalign(&memory, 4096, size + 4096), 0);
    data_ = static_cast<unsigned char*>(memory);
    std::memset(data_, 0xee, size + 4096);
  }
  ~AlignedBuffer() { free(data_); }
  unsigned char* data() { return data_; }
  std::vector<unsigned char> Bytes(size_t offset, size_t length) const {
    return std::vector<unsigned char>(data_ + offset, data_ + offset + length);
  }

 private:
  unsigned char* data_;
  size_t size_;
};

struct Mode {
  AioMode aio;
  bool direct;
};

std::string ModeName(const ::testing::TestParamInfo<Mode>& info) {
  return testing::AioTestName(info.param.aio) + (info.param.direct ? "Direct" : "Buffered");
}

class FileIoTest : public ::testing::TestWithParam<Mode> {
 protected:
  FileOptions Options(const std::string& path) const {
    FileOptions options;
    options.filename = path;
    options.aio = GetParam().aio;
    options.cache_direct = GetParam().direct;
    return options;
  }

  std::shared_ptr<BlockNode> Open(const std::string& path) {
    auto node = testing::OpenFile(Options(path));
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? *node : nullptr;
  }

  testing::ScratchDir dir_;
};

TEST_P(FileIoTest, ManyWritesInFlightReadBack) {
  constexpr size_t kChunk = 64 * 1024;
  constexpr int kChunks = 32;
  std::string path = dir_.CreateFile("image", kChunk * kChunks);
  auto node = Open(path);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->size(), kChunk * kChunks);
  EXPECT_EQ(node->driver_name(), "file");
  auto queue = testing::MakeQueue(*node);
  ASSERT_NE(queue->event_fd(), -1);

  AlignedBuffer data(kChunk * kChunks);
  std::vector<IoRequest> requests(kChunks);
  std::vector<Outcome> outcomes(kChunks);
  std::vector<struct iovec> iov(kChunks);
  // All data first: a request may start as soon as it is submitted.
  for (int i = 0; i < kChunks; ++i) {
    std::vector<unsigned char> pattern = Pattern(kChunk, i);
    std::memcpy(data.data() + i * kChunk, pattern.data(), kChunk);
  }
  for (int i = 0; i < kChunks; ++i) {
    // Reverse order so the file is not written front to back.
    int chunk = kChunks - 1 - i;
    iov[i] = {data.data() + chunk * kChunk, kChunk};
    Prepare(&requests[i], &outcomes[i], IoOp::kWrite, chunk * kChunk, kChunk, &iov[i], 1);
    queue->Submit(&requests[i]);
  }
  ASSERT_TRUE(WaitIdle(*queue));
  for (const Outcome& outcome : outcomes) {
    EXPECT_EQ(outcome.completions, 1);
    EXPECT_EQ(outcome.result, static_cast<int64_t>(kChunk));
  }
  EXPECT_EQ(testing::ReadFile(path, 0, kChunk * kChunks), data.Bytes(0, kChunk * kChunks));

  AlignedBuffer back(kChunk * kChunks);
  for (int i = 0; i < kChunks; ++i) {
    iov[i] = {back.data() + i * kChunk, kChunk};
    Prepare(&requests[i], &outcomes[i], IoOp::kRead, i * kChunk, kChunk, &iov[i], 1);
    queue->Submit(&requests[i]);
  }
  ASSERT_TRUE(WaitIdle(*queue));
  for (const Outcome& outcome : outcomes) EXPECT_EQ(outcome.result, static_cast<int64_t>(kChunk));
  EXPECT_EQ(back.Bytes(0, kChunk * kChunks), data.Bytes(0, kChunk * kChunks));
}

TEST_P(FileIoTest, ScatterGatherSegments) {
  std::string path = dir_.CreateFile("image", 1 << 20);
  auto node = Open(path);
  auto queue = testing::MakeQueue(*node);
  AlignedBuffer out(3 * 4096), in(3 * 4096);
  std::vector<unsigned char> pattern = Pattern(3 * 4096, 7);
  std::memcpy(out.data(), pattern.data(), pattern.size());
  struct iovec write_iov[3] = {{out.data(), 4096}, {out.data() + 4096, 8192}, {nullptr, 0}};
  EXPECT_EQ(RunOne(*queue, IoOp::kWrite, 65536, 12288, write_iov, 3), 12288);
  struct iovec read_iov[2] = {{in.data(), 8192}, {in.data() + 8192, 4096}};
  EXPECT_EQ(RunOne(*queue, IoOp::kRead, 65536, 12288, read_iov, 2), 12288);
  EXPECT_EQ(in.Bytes(0, 12288), pattern);
  EXPECT_EQ(testing::ReadFile(path, 65536, 12288), pattern);
}

// Odd offsets, lengths and buffer addresses, checked against a model of the file.
TEST_P(FileIoTest, UnalignedRequests) {
  constexpr size_t kSize = 256 * 1024;
  std::string path = dir_.CreateFile("image", kSize);
  auto node = Open(path);
  auto queue = testing::MakeQueue(*node);
  std::vector<unsigned char> model(kSize, 0);
  std::mt19937 random(42);
  AlignedBuffer buffer(80 * 1024);
  for (int round = 0; round < 200; ++round) {
    size_t length = 1 + random() % (70 * 1024);
    size_t offset = random() % (kSize - length);
    size_t misalign = random() % 4 == 0 ? 0 : 1 + random() % 511;
    unsigned char* memory = buffer.data() + misalign;
    if (random() % 2 == 0) {
      std::vector<unsigned char> pattern = Pattern(length, round);
      std::memcpy(memory, pattern.data(), length);
      // Two segments split at an odd point.
      size_t split = length / 3;
      struct iovec iov[2] = {{memory, split}, {memory + split, length - split}};
      ASSERT_EQ(RunOne(*queue, IoOp::kWrite, offset, length, iov, 2), static_cast<int64_t>(length))
          << "round " << round;
      std::memcpy(model.data() + offset, pattern.data(), length);
    } else {
      ASSERT_EQ(ReadAt(*queue, memory, length, offset), static_cast<int64_t>(length));
      ASSERT_EQ(std::memcmp(memory, model.data() + offset, length), 0)
          << "round " << round << " offset " << offset << " length " << length;
    }
  }
  EXPECT_EQ(testing::ReadFile(path, 0, kSize), model);
  EXPECT_EQ(testing::FileSize(path), kSize);
}

TEST_P(FileIoTest, FlushAndFua) {
  std::string path = dir_.CreateFile("image", 1 << 20);
  auto node = Open(path);
  auto queue = testing::MakeQueue(*node);
  AlignedBuffer data(8192);
  std::vector<unsigned char> pattern = Pattern(8192, 3);
  std::memcpy(data.data(), pattern.data(), 8192);
  EXPECT_EQ(WriteAt(*queue, data.data(), 8192, 4096, kIoFua), 8192);
  EXPECT_EQ(WriteAt(*queue, data.data() + 1, 1000, 20000, kIoFua), 1000);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(testing::ReadFile(path, 4096, 8192), pattern);
  EXPECT_EQ(testing::ReadFile(path, 20000, 1000), data.Bytes(1, 1000));

  FileOptions no_flush = Options(path);
  no_flush.cache_no_flush = true;
  no_flush.locking = LockingMode::kOff;
  auto second = testing::OpenFile(no_flush);
  ASSERT_TRUE(second.ok()) << second.status();
  auto second_queue = testing::MakeQueue(**second);
  EXPECT_EQ(RunOne(*second_queue, IoOp::kFlush, 0, 0), 0);
}

// Someone else shortened the file: the part past its end reads as zeroes, in whole blocks and
// in a block the end cuts.
TEST_P(FileIoTest, ReadPastEndOfFileGivesZeroes) {
  std::string path = dir_.CreateFile("image", 1 << 20);
  std::vector<unsigned char> pattern = Pattern(1000, 9);
  testing::WriteFile(path, pattern, 0);
  auto node = Open(path);
  auto queue = testing::MakeQueue(*node);
  ASSERT_EQ(truncate(path.c_str(), 1000), 0);
  AlignedBuffer data(8192);
  EXPECT_EQ(ReadAt(*queue, data.data(), 8192, 0), 8192);
  EXPECT_EQ(data.Bytes(0, 1000), pattern);
  EXPECT_EQ(data.Bytes(1000, 8192 - 1000), std::vector<unsigned char>(8192 - 1000, 0));
  std::memset(data.data(), 0xee, 8192);
  EXPECT_EQ(ReadAt(*queue, data.data(), 4096, 65536), 4096);
  EXPECT_EQ(data.Bytes(0, 4096), std::vector<unsigned char>(4096, 0));
}

// An image whose size is not a multiple of the block size keeps its size when its last,
// partial block is written (O_DIRECT writes it whole).
TEST_P(FileIoTest, PartialLastBlockKeepsFileSize) {
  constexpr uint64_t kSize = 65536 + 1000;
  std::string path = dir_.CreateFile("image", kSize);
  auto node = Open(path);
  auto queue = testing::MakeQueue(*node);
  std::vector<unsigned char> pattern = Pattern(1500, 5);
  EXPECT_EQ(WriteAt(*queue, pattern.data(), 1500, kSize - 1500), 1500);
  EXPECT_EQ(testing::FileSize(path), kSize);
  EXPECT_EQ(testing::ReadFile(path, kSize - 1500, 1500), pattern);
  std::vector<unsigned char> back(1500);
  EXPECT_EQ(ReadAt(*queue, back.data(), 1500, kSize - 1500), 1500);
  EXPECT_EQ(back, pattern);
  EXPECT_EQ(WriteAt(*queue, pattern.data(), 1, kSize), -EINVAL);
}

// A queue destroyed with requests in the kernel and on workers waits for them and runs no
// callback afterwards.
TEST_P(FileIoTest, DestroyWithRequestsInFlight) {
  constexpr int kRequests = 64;
  std::string path = dir_.CreateFile("image", kRequests * 8192);
  auto node = Open(path);
  AlignedBuffer data(kRequests * 8192);
  std::vector<IoRequest> requests(kRequests);
  std::vector<Outcome> outcomes(kRequests);
  std::vector<struct iovec> iov(kRequests);
  {
    auto queue = testing::MakeQueue(*node);
    for (int i = 0; i < kRequests; ++i) {
      // Every other request unaligned, so both libaio and the workers hold some.
      size_t skew = i % 2;
      iov[i] = {data.data() + i * 8192 + skew, 4096};
      Prepare(&requests[i], &outcomes[i], i % 3 ? IoOp::kWrite : IoOp::kRead, i * 8192 + skew, 4096,
              &iov[i], 1);
      queue->Submit(&requests[i]);
    }
    queue->Poll();
  }
  // Only the Poll() above may have run callbacks, never the destructor after a request ended.
  for (const Outcome& outcome : outcomes) EXPECT_LE(outcome.completions, 1);
  auto queue = testing::MakeQueue(*node);
  EXPECT_EQ(ReadAt(*queue, data.data(), 4096, 0), 4096);
}

// The contract LSEEK's block-status loop relies on (block_node.h): a request submitted from a
// callback is under way when Poll() returns, so waiting on event_fd() alone, as a queue thread
// does, sees it complete. A driver that left it queued until some later Poll() would hang here.
struct Relay {
  IoQueue* queue;
  IoOp next_op;
  int remaining;
  int64_t last_result;
};

void SubmitNext(IoRequest* request, int64_t result) {
  auto* relay = static_cast<Relay*>(request->opaque);
  relay->last_result = result;
  if (--relay->remaining <= 0 || result < 0) return;
  request->op = relay->next_op;
  relay->queue->Submit(request);
}

TEST_P(FileIoTest, RequestsSubmittedFromACallbackStartWithinPoll) {
  const std::string path = dir_.CreateFile("image", 1 << 20);
  testing::WriteFile(path, Pattern(1 << 20, 21), 0);
  auto node = Open(path);
  ASSERT_NE(node, nullptr);
  auto queue = testing::MakeQueue(*node);
  AlignedBuffer buffer(4096);
  struct iovec iov = {buffer.data(), 4096};
  for (IoOp next : {IoOp::kRead, IoOp::kBlockStatus, IoOp::kFlush}) {
    Relay relay{queue.get(), next, 6, INT64_MIN};
    IoRequest request;
    request.op = IoOp::kRead;
    request.offset = 8192;
    request.length = 4096;
    request.iov = &iov;
    request.iovcnt = 1;
    request.done = SubmitNext;
    request.opaque = &relay;
    queue->Submit(&request);
    queue->Poll();
    while (queue->in_flight() > 0) {
      ASSERT_GE(queue->event_fd(), 0) << "requests in flight after Poll() but nothing to wait on";
      struct pollfd pfd = {queue->event_fd(), POLLIN, 0};
      ASSERT_EQ(poll(&pfd, 1, 20000), 1) << "a request submitted from a callback never started";
      queue->Poll();
    }
    EXPECT_EQ(relay.remaining, 0);
    EXPECT_GE(relay.last_result, 0);
  }
  const std::vector<unsigned char> pattern = Pattern(1 << 20, 21);
  EXPECT_EQ(buffer.Bytes(0, 4096),
            std::vector<unsigned char>(pattern.begin() + 8192, pattern.begin() + 12288));
}

// A batch is held back only for requests the kernel could merge into it: a request that does
// not continue the one before it sends the batch on at once, before any Poll(), so random
// requests read together do not wait for each other (and then travel as one convoy).
TEST_P(FileIoTest, NonContiguousRequestSendsTheBatchBeforePoll) {
  if (GetParam().aio == AioMode::kThreads) GTEST_SKIP() << "workers start in Poll()";
  const std::string path = dir_.CreateFile("image", 1 << 20);
  testing::WriteFile(path, Pattern(1 << 20, 22), 0);
  auto node = Open(path);
  ASSERT_NE(node, nullptr);
  auto queue = testing::MakeQueue(*node);
  AlignedBuffer buffer(2 * 4096);
  struct iovec iov[2] = {{buffer.data(), 4096}, {buffer.data() + 4096, 4096}};
  IoRequest requests[2];
  Outcome outcomes[2];
  Prepare(&requests[0], &outcomes[0], IoOp::kRead, 65536, 4096, &iov[0], 1);
  Prepare(&requests[1], &outcomes[1], IoOp::kRead, 8192, 4096, &iov[1], 1);
  queue->Submit(&requests[0]);
  queue->Submit(&requests[1]);
  struct pollfd pfd = {queue->event_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 20000), 1) << "the first request did not start before Poll()";
  ASSERT_TRUE(WaitIdle(*queue));
  EXPECT_EQ(outcomes[0].result, 4096);
  EXPECT_EQ(outcomes[1].result, 4096);
  const std::vector<unsigned char> pattern = Pattern(1 << 20, 22);
  EXPECT_EQ(buffer.Bytes(0, 4096),
            std::vector<unsigned char>(pattern.begin() + 65536, pattern.begin() + 69632));
  EXPECT_EQ(buffer.Bytes(4096, 4096),
            std::vector<unsigned char>(pattern.begin() + 8192, pattern.begin() + 12288));
}

// aio-max-batch (QEMU's, for aio=native): contiguous requests are held back for a merge, but a
// batch that reaches the limit goes to the kernel at once, before any Poll().
TEST_P(FileIoTest, AioMaxBatchSendsAFullBatchBeforePoll) {
  if (GetParam().aio != AioMode::kNative) GTEST_SKIP() << "aio-max-batch is libaio's";
  const std::string path = dir_.CreateFile("image", 1 << 20);
  testing::WriteFile(path, Pattern(1 << 20, 23), 0);
  FileOptions options = Options(path);
  options.aio_max_batch = 2;
  auto node = testing::OpenFile(options);
  ASSERT_TRUE(node.ok()) << node.status();
  auto queue = testing::MakeQueue(**node);
  AlignedBuffer buffer(3 * 4096);
  struct iovec iov[3];
  IoRequest requests[3];
  Outcome outcomes[3];
  for (int i = 0; i < 3; ++i) {
    iov[i] = {buffer.data() + i * 4096, 4096};
    Prepare(&requests[i], &outcomes[i], IoOp::kRead, 8192 + i * 4096, 4096, &iov[i], 1);
    queue->Submit(&requests[i]);
  }
  struct pollfd pfd = {queue->event_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 20000), 1) << "the full batch did not start before Poll()";
  ASSERT_TRUE(WaitIdle(*queue));
  for (const Outcome& outcome : outcomes) EXPECT_EQ(outcome.result, 4096);
  const std::vector<unsigned char> pattern = Pattern(1 << 20, 23);
  EXPECT_EQ(buffer.Bytes(0, 3 * 4096),
            std::vector<unsigned char>(pattern.begin() + 8192, pattern.begin() + 8192 + 3 * 4096));
}

INSTANTIATE_TEST_SUITE_P(
    AllModes, FileIoTest,
    ::testing::Values(Mode{AioMode::kNative, true}, Mode{AioMode::kNative, false},
                      Mode{AioMode::kThreads, true}, Mode{AioMode::kThreads, false},
                      Mode{AioMode::kIoUring, true}, Mode{AioMode::kIoUring, false}),
    ModeName);

}  // namespace
}  // namespace bexd::block
