// SPDX-License-Identifier: GPL-2.0-or-later
// The libaio context a thread's file queues share (aio_context.h): each queue gets its own
// completions whichever queue takes them from the ring, more requests than the ring holds wait
// for room, a queue that goes with requests in the kernel leaves the others theirs, and a
// thread's context serves the next thread once the first has ended, and contexts beyond the pool's
// size are destroyed once their threads have ended.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "block/aio_context.h"
#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block::testing {
namespace {

constexpr uint64_t kBlock = 4096;

struct AlignedFree {
  void operator()(void* memory) const { std::free(memory); }
};
using Buffer = std::unique_ptr<unsigned char, AlignedFree>;

Buffer Aligned(size_t length) {
  return Buffer(static_cast<unsigned char*>(std::aligned_alloc(kBlock, length)));
}

// Requests of one queue: each reads or writes its own block.
struct Batch {
  Batch(IoOp op, size_t count) : op(op), requests(count), outcomes(count), iovs(count) {
    data = Aligned(count * kBlock);
  }
  void SubmitTo(IoQueue& queue, uint32_t seed) {
    if (op == IoOp::kWrite) {
      std::vector<unsigned char> pattern = Pattern(requests.size() * kBlock, seed);
      std::copy(pattern.begin(), pattern.end(), data.get());
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      iovs[i] = {data.get() + i * kBlock, kBlock};
      Prepare(&requests[i], &outcomes[i], op, i * kBlock, kBlock, &iovs[i], 1);
      queue.Submit(&requests[i]);
    }
  }
  size_t Done() const {
    size_t done = 0;
    for (const Outcome& outcome : outcomes) {
      if (outcome.done) {
        EXPECT_EQ(outcome.result, static_cast<int64_t>(kBlock));
        EXPECT_EQ(outcome.completions, 1);
        ++done;
      }
    }
    return done;
  }
  std::vector<unsigned char> Data() const {
    return std::vector<unsigned char>(data.get(), data.get() + requests.size() * kBlock);
  }
  IoOp op;
  std::vector<IoRequest> requests;
  std::vector<Outcome> outcomes;
  std::vector<struct iovec> iovs;
  Buffer data;
};

class FileSharedContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    reads_image_ = dir_.path() + "/reads";
    writes_image_ = dir_.path() + "/writes";
    for (const std::string& path : {reads_image_, writes_image_}) {
      close(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    }
    WriteFile(reads_image_, Pattern(kImageBlocks * kBlock, 7), 0);
    WriteFile(writes_image_, std::vector<unsigned char>(kImageBlocks * kBlock), 0);
    reads_ = OpenFileOrFail(reads_image_, AioMode::kNative, /*direct=*/true);
    writes_ = OpenFileOrFail(writes_image_, AioMode::kNative, /*direct=*/true);
    ASSERT_NE(reads_, nullptr);
    ASSERT_NE(writes_, nullptr);
  }

  static constexpr size_t kImageBlocks = 400;
  ScratchDir dir_;
  std::string reads_image_;
  std::string writes_image_;
  std::shared_ptr<BlockNode> reads_;
  std::shared_ptr<BlockNode> writes_;
};

TEST_F(FileSharedContextTest, EachQueueGetsItsOwnCompletions) {
  std::unique_ptr<IoQueue> a = MakeQueue(*reads_);
  std::unique_ptr<IoQueue> b = MakeQueue(*writes_);
  // A read the kernel finishes inside io_submit is taken by a's own Poll(); try until one is not.
  bool handed_over = false;
  for (int attempt = 0; attempt < 50 && !handed_over; ++attempt) {
    Batch read(IoOp::kRead, 1);
    Batch write(IoOp::kWrite, 1);
    read.SubmitTo(*a, 0);
    write.SubmitTo(*b, attempt);
    a->Poll();  // sends a's read
    const bool left_in_ring = read.Done() == 0;
    // Its event is in the ring once a's eventfd is readable (the kernel writes the event first).
    struct pollfd pfd = {a->event_fd(), POLLIN, 0};
    if (left_in_ring) {
      ASSERT_EQ(poll(&pfd, 1, 10000), 1);
    }
    // b sends its write and takes a's event: handed over, its callback runs from a's Poll().
    b->Poll();
    if (left_in_ring) {
      EXPECT_EQ(read.Done(), 0u) << "b ran a's callback";
      handed_over = true;
    }
    ASSERT_TRUE(WaitIdle(*a));
    EXPECT_EQ(read.Done(), 1u);
    ASSERT_TRUE(WaitIdle(*b));
    EXPECT_EQ(write.Done(), 1u);
    EXPECT_EQ(read.Data(), ReadFile(reads_image_, 0, kBlock));
    EXPECT_EQ(write.Data(), ReadFile(writes_image_, 0, kBlock));
  }
  EXPECT_TRUE(handed_over) << "every read finished inside io_submit";
}

TEST_F(FileSharedContextTest, MoreRequestsThanTheRingHoldsWaitForRoom) {
  std::unique_ptr<IoQueue> a = MakeQueue(*reads_);
  std::unique_ptr<IoQueue> b = MakeQueue(*writes_);
  static_assert(2 * kImageBlocks > AioContext::kDepth + 100);
  Batch reads(IoOp::kRead, kImageBlocks);
  Batch writes(IoOp::kWrite, kImageBlocks);
  reads.SubmitTo(*a, 0);
  writes.SubmitTo(*b, 11);
  // Each queue waits only on its own eventfd, as a level-triggered waiter does.
  for (int rounds = 0; rounds < 10000 && (a->in_flight() > 0 || b->in_flight() > 0); ++rounds) {
    struct pollfd fds[2] = {{a->event_fd(), POLLIN, 0}, {b->event_fd(), POLLIN, 0}};
    poll(fds, 2, 100);
    if (fds[0].revents != 0 || rounds % 2 == 0) a->Poll();
    if (fds[1].revents != 0 || rounds % 2 == 1) b->Poll();
  }
  EXPECT_EQ(reads.Done(), kImageBlocks);
  EXPECT_EQ(writes.Done(), kImageBlocks);
  EXPECT_EQ(reads.Data(), ReadFile(reads_image_, 0, kImageBlocks * kBlock));
  EXPECT_EQ(writes.Data(), ReadFile(writes_image_, 0, kImageBlocks * kBlock));
}

TEST_F(FileSharedContextTest, AQueueThatGoesLeavesTheOthersTheirCompletions) {
  std::unique_ptr<IoQueue> a = MakeQueue(*reads_);
  std::unique_ptr<IoQueue> b = MakeQueue(*writes_);
  Batch reads(IoOp::kRead, 100);
  Batch writes(IoOp::kWrite, 100);
  reads.SubmitTo(*a, 0);
  writes.SubmitTo(*b, 5);
  b->Poll();  // b's writes go first, so a meets their events
  a->Poll();
  a.reset();  // waits for its reads still in the kernel, handing b's events over as they come
  ASSERT_TRUE(WaitIdle(*b));
  EXPECT_EQ(writes.Done(), 100u);
  EXPECT_EQ(writes.Data(), ReadFile(writes_image_, 0, 100 * kBlock));
}

TEST(AioContextTest, AnEndedThreadsContextServesTheNextThread) {
  auto handle_of_a_thread = [] {
    io_context_t handle = nullptr;
    std::thread([&handle] {
      auto context = AioContext::ForThisThread();
      ASSERT_TRUE(context.ok()) << context.status();
      EXPECT_EQ(AioContext::ForThisThread()->get(), context->get()) << "one context per thread";
      handle = (*context)->handle();
    }).join();
    return handle;
  };
  io_context_t first = handle_of_a_thread();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(handle_of_a_thread(), first);
  // While a thread holds it, another thread gets a context of its own.
  auto mine = AioContext::ForThisThread();
  ASSERT_TRUE(mine.ok());
  io_context_t other = handle_of_a_thread();
  EXPECT_NE(other, (*mine)->handle());
}

// The kernel maps each libaio context's ring into the process as "/[aio]".
int AioContextsOfThisProcess() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/[aio]") != std::string::npos) ++count;
  }
  return count;
}

TEST(AioContextTest, ContextsBeyondThePoolAreDestroyedWhenTheirThreadsEnd) {
  const int before = AioContextsOfThisProcess();
  constexpr int kThreads = AioContext::kPoolSize + 24;
  // Each thread holds its context until the count below is taken.
  std::latch all_have_one(kThreads + 1);
  std::latch counted(1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&all_have_one, &counted] {
      auto context = AioContext::ForThisThread();
      EXPECT_TRUE(context.ok()) << context.status();
      all_have_one.arrive_and_wait();
      counted.wait();
    });
  }
  all_have_one.arrive_and_wait();
  EXPECT_GE(AioContextsOfThisProcess(), kThreads) << "the threads did not hold a context each";
  counted.count_down();
  for (std::thread& thread : threads) thread.join();
  // The surplus goes on a thread of its own, ~30 ms per context.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (AioContextsOfThisProcess() > before + static_cast<int>(AioContext::kPoolSize) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const int kept = AioContextsOfThisProcess();
  EXPECT_LE(kept, before + static_cast<int>(AioContext::kPoolSize));
  // What the pool kept still serves new threads.
  std::thread([] { EXPECT_TRUE(AioContext::ForThisThread().ok()); }).join();
  EXPECT_LE(AioContextsOfThisProcess(), kept);
}

}  // namespace
}  // namespace bexd::block::testing
