// SPDX-License-Identifier: GPL-2.0-or-later
// A throughput sanity check, not a benchmark and never an assertion: 4 KiB random reads and
// allocating writes through the qcow2 driver next to the same work on its raw file child, in
// process, at queue depth 16. Disabled by default; run it with
//   build/tests/bexd_block_tests --gtest_also_run_disabled_tests --gtest_filter='*Qcow2Throughput*'
// It prints the rates (docs/qcow2.md quotes them).
#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/block/file_fixture.h"
#include "tests/block/qcow2_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::RunCommand;
using testing::ScratchDir;

constexpr uint64_t kImageSize = uint64_t{256} << 20;
constexpr uint64_t kBlock = 4096;
constexpr int kDepth = 16;
constexpr auto kDuration = std::chrono::seconds(3);

// 4 KiB requests at random aligned offsets, kDepth in flight, for kDuration; requests per second.
double RandomIops(BlockNode& node, IoOp op, uint32_t seed) {
  auto queue = testing::MakeQueue(node);
  std::vector<IoRequest> requests(kDepth);
  std::vector<testing::Outcome> outcomes(kDepth);
  // Page-aligned buffers: O_DIRECT needs no bounce buffer for them.
  std::vector<unsigned char> memory(kDepth * kBlock + 4096);
  unsigned char* base = memory.data() + (4096 - reinterpret_cast<uintptr_t>(memory.data()) % 4096);
  std::vector<unsigned char> pattern = testing::Pattern(kBlock, seed);
  for (int slot = 0; slot < kDepth; ++slot) {
    std::memcpy(base + slot * kBlock, pattern.data(), kBlock);
  }
  std::vector<struct iovec> iovs(kDepth);
  std::mt19937_64 random(seed);
  uint64_t completed = 0;
  auto submit = [&](int slot) {
    uint64_t offset = (random() % (node.size() / kBlock)) * kBlock;
    iovs[slot] = {base + slot * kBlock, kBlock};
    outcomes[slot] = testing::Outcome();
    testing::Prepare(&requests[slot], &outcomes[slot], op, offset, kBlock, &iovs[slot], 1);
    queue->Submit(&requests[slot]);
  };
  for (int slot = 0; slot < kDepth; ++slot) submit(slot);
  auto start = std::chrono::steady_clock::now();
  auto end = start + kDuration;
  while (std::chrono::steady_clock::now() < end) {
    queue->Poll();
    bool resubmitted = false;
    for (int slot = 0; slot < kDepth; ++slot) {
      if (!outcomes[slot].done) continue;
      EXPECT_EQ(outcomes[slot].result, static_cast<int64_t>(kBlock));
      ++completed;
      submit(slot);
      resubmitted = true;
    }
    // New submissions get under way in the next Poll(), which may also complete them.
    if (resubmitted) continue;
    if (queue->event_fd() >= 0) {
      struct pollfd pfd = {queue->event_fd(), POLLIN, 0};
      poll(&pfd, 1, 10);
    }
  }
  EXPECT_TRUE(testing::WaitIdle(*queue));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(completed) / seconds;
}

double ParallelIops(BlockNode& node, IoOp op, int threads) {
  std::vector<double> rates(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] { rates[t] = RandomIops(node, op, 100 + t); });
  }
  for (std::thread& worker : workers) worker.join();
  double total = 0;
  for (double rate : rates) total += rate;
  return total;
}

TEST(Qcow2ThroughputTest, DISABLED_RandomReadsAndAllocatingWritesNextToTheRawFile) {
  ScratchDir dir("qcow2");
  std::string raw = dir.CreateFile("data.raw", kImageSize);
  for (uint64_t offset = 0; offset < kImageSize; offset += 16 << 20) {
    testing::WriteFile(raw, testing::Pattern(16 << 20, static_cast<uint32_t>(offset >> 20)),
                       offset);
  }
  std::string image = dir.path() + "/data.qcow2";
  RunCommand("qemu-img convert -f raw -O qcow2 " + raw + " " + image);
  // Large enough that random writes nearly always land in a cluster nobody wrote yet.
  std::string empty = dir.path() + "/empty.qcow2";
  RunCommand("qemu-img create -f qcow2 " + empty + " 64G >/dev/null");
  std::string empty_raw = dir.CreateFile("empty.raw", uint64_t{64} << 30);
  for (bool direct : {false, true}) {
    testing::ImageOptions options;
    options.direct = direct;
    auto raw_node = testing::OpenFileOrFail(raw, AioMode::kNative, direct);
    auto qcow2_node = testing::OpenImageOrFail(image, true, options);
    ASSERT_NE(raw_node, nullptr);
    ASSERT_NE(qcow2_node, nullptr);
    const char* mode = direct ? "cache.direct=on " : "cache.direct=off";
    for (int threads : {1, 4}) {
      double file_rate = ParallelIops(*raw_node, IoOp::kRead, threads);
      double qcow2_rate = ParallelIops(*qcow2_node, IoOp::kRead, threads);
      std::printf(
          "4k random read,  %s, %d queue(s) x QD%d: file %8.0f IOPS, qcow2 %8.0f IOPS "
          "(%.2fx)\n",
          mode, threads, kDepth, file_rate, qcow2_rate, qcow2_rate / file_rate);
    }
  }
  // First writes into an empty image: every 4 KiB write allocates a 64 KiB cluster.
  auto raw_node = testing::OpenFileOrFail(empty_raw, AioMode::kNative, false);
  auto qcow2_node = testing::OpenImageOrFail(empty, false);
  double file_rate = ParallelIops(*raw_node, IoOp::kWrite, 4);
  double qcow2_rate = ParallelIops(*qcow2_node, IoOp::kWrite, 4);
  std::printf(
      "4k random write into an empty image, 4 queues x QD%d: file %8.0f IOPS, qcow2 "
      "%8.0f IOPS (%.2fx)\n",
      kDepth, file_rate, qcow2_rate, qcow2_rate / file_rate);
}

}  // namespace
}  // namespace bexd::block
