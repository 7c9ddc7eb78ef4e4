// SPDX-License-Identifier: GPL-2.0-or-later
#include <gtest/gtest.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "block/open.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::Outcome;
using testing::Prepare;
using testing::ReadAt;
using testing::RunOne;
using testing::WaitIdle;
using testing::WriteAt;

std::shared_ptr<BlockNode> OpenNull(NullOptions options, bool read_only = false) {
  BlockdevOptions blockdev;
  blockdev.node_name = "null0";
  blockdev.read_only = read_only;
  blockdev.driver = options;
  auto node = OpenBlockNode(blockdev);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *node : nullptr;
}

std::unique_ptr<IoQueue> Queue(BlockNode& node) {
  auto queue = node.CreateQueue();
  EXPECT_TRUE(queue.ok()) << queue.status();
  return queue.ok() ? std::move(*queue) : nullptr;
}

TEST(NullNode, DefaultsMatchQemu) {
  auto node = OpenNull(NullOptions());
  EXPECT_EQ(node->size(), uint64_t{1} << 30);
  EXPECT_EQ(node->driver_name(), "null-co");
  EXPECT_EQ(node->node_name(), "null0");
  EXPECT_FALSE(node->read_only());
  EXPECT_EQ(node->request_alignment(), 1u);
  auto queue = Queue(*node);
  EXPECT_EQ(queue->event_fd(), -1);
}

TEST(NullNode, ReadLeavesBufferAloneWithoutReadZeroes) {
  auto node = OpenNull(NullOptions{.size = 1 << 20});
  auto queue = Queue(*node);
  std::vector<unsigned char> buffer(4096, 0xab);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), buffer.size(), 8192), 4096);
  EXPECT_EQ(buffer, std::vector<unsigned char>(4096, 0xab));
}

TEST(NullNode, ReadZeroesFillsEverySegment) {
  auto node = OpenNull(NullOptions{.size = 1 << 20, .read_zeroes = true});
  auto queue = Queue(*node);
  std::vector<unsigned char> a(100, 0xab), b(3000, 0xcd);
  struct iovec iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  EXPECT_EQ(RunOne(*queue, IoOp::kRead, 7, 3100, iov, 2), 3100);
  EXPECT_EQ(a, std::vector<unsigned char>(100, 0));
  EXPECT_EQ(b, std::vector<unsigned char>(3000, 0));
}

TEST(NullNode, WritesAndOtherOpsSucceedWithinSize) {
  auto node = OpenNull(NullOptions{.size = 1 << 20});
  auto queue = Queue(*node);
  std::vector<unsigned char> data(512, 1);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), (1 << 20) - 512, kIoFua), 512);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 4096, 65536), 65536);
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 0, 1 << 20, nullptr, 0, kIoMayUnmap), 1 << 20);
  EXPECT_EQ(RunOne(*queue, IoOp::kAllocate, 0, 1 << 20), 1 << 20);
}

TEST(NullNode, RejectsBadRequests) {
  auto node = OpenNull(NullOptions{.size = 1 << 20});
  auto queue = Queue(*node);
  std::vector<unsigned char> data(512);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), (1 << 20) - 511), -EINVAL);
  EXPECT_EQ(ReadAt(*queue, data.data(), data.size(), uint64_t{1} << 63), -EINVAL);
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 1, UINT64_MAX), -EINVAL);
  struct iovec iov = {data.data(), data.size()};
  // The iovec holds 512 bytes but the request claims 1024.
  EXPECT_EQ(RunOne(*queue, IoOp::kRead, 0, 1024, &iov, 1), -EINVAL);
  EXPECT_EQ(RunOne(*queue, IoOp::kWrite, 0, 512, &iov, 1, 1u << 7), -EINVAL);
  EXPECT_EQ(RunOne(*queue, static_cast<IoOp>(99), 0, 0), -EINVAL);
}

TEST(NullNode, ReadOnlyRefusesModifications) {
  auto node = OpenNull(NullOptions{.size = 1 << 20}, /*read_only=*/true);
  EXPECT_TRUE(node->read_only());
  auto queue = Queue(*node);
  std::vector<unsigned char> data(512);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 0), -EROFS);
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 0, 512), -EROFS);
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 0, 512), -EROFS);
  EXPECT_EQ(RunOne(*queue, IoOp::kAllocate, 0, 512), -EROFS);
  EXPECT_EQ(ReadAt(*queue, data.data(), data.size(), 0), 512);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
}

TEST(NullNode, BlockStatus) {
  auto zeroes = OpenNull(NullOptions{.size = 1 << 20, .read_zeroes = true});
  auto queue = Queue(*zeroes);
  bool data = true;
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 4096, 1 << 20, nullptr, 0, 0, &data),
            (1 << 20) - 4096);
  EXPECT_FALSE(data);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 0, 512, nullptr, 0, 0, &data), 512);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 1 << 20, 512), 0);

  auto plain = OpenNull(NullOptions{.size = 1 << 20});
  auto plain_queue = Queue(*plain);
  EXPECT_EQ(RunOne(*plain_queue, IoOp::kBlockStatus, 0, 1 << 21, nullptr, 0, 0, &data), 1 << 20);
  EXPECT_TRUE(data);
}

// It stores nothing: nothing to free or flush, and no size of its own to change.
TEST(NullNode, Capabilities) {
  const Capabilities capabilities = OpenNull(NullOptions())->capabilities();
  EXPECT_FALSE(capabilities.discard);
  EXPECT_TRUE(capabilities.write_zeroes);
  EXPECT_TRUE(capabilities.block_status);
  EXPECT_FALSE(capabilities.flush);
  EXPECT_TRUE(capabilities.fua);
  EXPECT_FALSE(capabilities.resize);
}

TEST(NullNode, CannotResize) {
  auto node = OpenNull(NullOptions());
  absl::Status status = node->Truncate(4096);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(status.message().find("null0"), std::string::npos) << status;
}

void Resubmit(IoRequest* request, int64_t result);

struct Chain {
  IoQueue* queue;
  int remaining;
  int64_t last_result;
};

void Resubmit(IoRequest* request, int64_t result) {
  auto* chain = static_cast<Chain*>(request->opaque);
  chain->last_result = result;
  if (--chain->remaining > 0) chain->queue->Submit(request);
}

TEST(NullNode, CallbackMaySubmitAgain) {
  for (uint64_t latency : {uint64_t{0}, uint64_t{1000}}) {
    auto node = OpenNull(NullOptions{.size = 1 << 20, .latency_ns = latency});
    auto queue = Queue(*node);
    Chain chain{queue.get(), 5, 0};
    IoRequest request;
    request.op = IoOp::kFlush;
    request.done = Resubmit;
    request.opaque = &chain;
    queue->Submit(&request);
    EXPECT_TRUE(WaitIdle(*queue));
    EXPECT_EQ(chain.remaining, 0) << "latency " << latency;
    EXPECT_EQ(chain.last_result, 0);
  }
}

TEST(NullNode, LatencyKeepsManyRequestsInFlightWithoutBlocking) {
  // A latency long enough that nothing can be due right after submission on any machine.
  auto node =
      OpenNull(NullOptions{.size = 1 << 20, .read_zeroes = true, .latency_ns = 1'500'000'000});
  auto queue = Queue(*node);
  ASSERT_GE(queue->event_fd(), 0);
  constexpr int kRequests = 16;
  std::vector<IoRequest> requests(kRequests);
  std::vector<Outcome> outcomes(kRequests);
  std::vector<std::vector<unsigned char>> buffers(kRequests, std::vector<unsigned char>(512, 7));
  std::vector<struct iovec> iov(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    iov[i] = {buffers[i].data(), 512};
    Prepare(&requests[i], &outcomes[i], IoOp::kRead, 512 * i, 512, &iov[i], 1);
    queue->Submit(&requests[i]);
  }
  queue->Poll();
  EXPECT_EQ(queue->in_flight(), static_cast<uint32_t>(kRequests));
  struct pollfd pfd = {queue->event_fd(), POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0) << "the timer fired long before the latency";
  ASSERT_TRUE(WaitIdle(*queue));
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(outcomes[i].completions, 1);
    EXPECT_EQ(outcomes[i].result, 512);
    EXPECT_EQ(buffers[i], std::vector<unsigned char>(512, 0));
  }
  // Nothing left: the fd must not stay readable (a level-triggered epoll would spin).
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
}

TEST(NullNode, QueuesOnSeveralThreads) {
  auto node = OpenNull(NullOptions{.size = 1 << 20, .latency_ns = 100'000});
  std::vector<std::thread> threads;
  std::vector<int> completed(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto queue = node->CreateQueue();
      if (!queue.ok()) return;
      std::vector<unsigned char> data(4096);
      for (int i = 0; i < 50; ++i) {
        if (WriteAt(**queue, data.data(), data.size(), 4096 * i) == 4096) ++completed[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(completed, std::vector<int>(4, 50));
}

TEST(OpenBlockNode, NeedsANodeName) {
  BlockdevOptions options;
  options.driver = NullOptions();
  auto node = OpenBlockNode(options);
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace bexd::block
