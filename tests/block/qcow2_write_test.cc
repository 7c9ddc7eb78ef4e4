// Writes through the qcow2 driver, checked by QEMU: `qemu-img check` finds no corruption and no
// leak after a clean close, and `qemu-img compare` finds the image equal to a raw file that got
// the same writes.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/block/file_fixture.h"
#include "tests/block/qcow2_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::MakeQueue;
using testing::OpenImageOrFail;
using testing::QemuCheck;
using testing::RunCommand;
using testing::ScratchDir;
using testing::WriteAt;

constexpr uint64_t kMiB = 1 << 20;

struct WriteCase {
  const char* compat;
  uint64_t cluster_size;
  bool backing;
};

void PrintTo(const WriteCase& c, std::ostream* os) {
  *os << "compat " << c.compat << ", cluster " << c.cluster_size << (c.backing ? ", backed" : "");
}

std::string CaseName(const ::testing::TestParamInfo<WriteCase>& info) {
  return std::string(info.param.compat[0] == '0' ? "V2" : "V3") + "Cluster" +
         std::to_string(info.param.cluster_size) + (info.param.backing ? "Backed" : "");
}

class Qcow2WriteTest : public ::testing::TestWithParam<WriteCase> {
 protected:
  // An empty image of `size` bytes (over a backing file with data if the case asks), and a raw
  // reference with the same contents.
  void MakeImage(uint64_t size) {
    image_ = dir_.path() + "/image.qcow2";
    reference_ = dir_.path() + "/reference.raw";
    std::string options = "-o compat=" + std::string(GetParam().compat) +
                          ",cluster_size=" + std::to_string(GetParam().cluster_size);
    if (GetParam().backing) {
      // The backing file is shorter than the image: past its end the image reads zeroes.
      std::string base = dir_.CreateFile("base.raw", size - size / 4);
      testing::WriteFile(base, testing::Pattern(size - size / 4, 99), 0);
      RunCommand("cd " + dir_.path() + " && qemu-img create -f qcow2 " + options +
                 " -b base.raw -F raw image.qcow2 " + std::to_string(size) + " >/dev/null");
    } else {
      RunCommand("qemu-img create -f qcow2 " + options + " " + image_ + " " + std::to_string(size) +
                 " >/dev/null");
    }
    RunCommand("qemu-img convert -O raw " + image_ + " " + reference_);
  }

  void WriteBoth(IoQueue& queue, const std::vector<unsigned char>& data, uint64_t offset) {
    ASSERT_EQ(WriteAt(queue, data.data(), data.size(), offset), static_cast<int64_t>(data.size()))
        << "write at " << offset;
    testing::WriteFile(reference_, data, offset);
  }

  testing::CheckResult ExpectConsistentAndEqual() {
    testing::CheckResult check = QemuCheck(image_);
    EXPECT_EQ(check.exit_status, 0) << check.output;
    EXPECT_EQ(check.corruptions, 0u) << check.output;
    EXPECT_EQ(check.leaks, 0u) << check.output;
    RunCommand("qemu-img compare -f qcow2 -F raw " + image_ + " " + reference_);
    return check;
  }

  ScratchDir dir_{"qcow2"};
  std::string image_;
  std::string reference_;
};

TEST_P(Qcow2WriteTest, RandomAndSequentialWritesMatchARawReference) {
  MakeImage(16 * kMiB);
  {
    auto node = OpenImageOrFail(image_, false);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    std::mt19937_64 random(GetParam().cluster_size + GetParam().backing);
    for (int i = 0; i < 150; ++i) {
      uint64_t length = 1 + random() % (3 * GetParam().cluster_size + 5000);
      length = std::min<uint64_t>(length, 2 * kMiB);
      uint64_t offset = random() % (16 * kMiB - length);
      WriteBoth(*queue, testing::Pattern(length, static_cast<uint32_t>(i)), offset);
    }
    // Sequential writes of 64 KiB from 10 MiB on.
    for (int i = 0; i < 32; ++i) {
      WriteBoth(*queue, testing::Pattern(65536, 1000 + i), 10 * kMiB + i * 65536);
    }
    // Reads see what was written.
    std::vector<unsigned char> expected = testing::ReadFile(reference_, 0, 16 * kMiB);
    queue.reset();
    EXPECT_EQ(testing::FirstDifference(testing::ReadAll(*node), expected), -1);
  }
  ExpectConsistentAndEqual();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Qcow2WriteTest,
    ::testing::Values(WriteCase{"0.10", 512, false}, WriteCase{"1.1", 512, true},
                      WriteCase{"1.1", 4096, false}, WriteCase{"0.10", 4096, true},
                      WriteCase{"1.1", 65536, false}, WriteCase{"1.1", 65536, true},
                      WriteCase{"0.10", 65536, false}, WriteCase{"1.1", 2 * kMiB, false},
                      WriteCase{"1.1", 2 * kMiB, true}),
    CaseName);

// Keeps `depth` writes in flight on a queue of the calling thread until `writes` is done.
struct PlannedWrite {
  uint64_t offset;
  std::vector<unsigned char> data;
};

void WriteWithDepth(BlockNode& node, const std::vector<PlannedWrite>& writes, int depth) {
  auto queue = MakeQueue(node);
  ASSERT_NE(queue, nullptr);
  std::vector<IoRequest> requests(depth);
  std::vector<testing::Outcome> outcomes(depth);
  std::vector<struct iovec> iovs(depth);
  std::vector<bool> busy(depth, false);
  size_t next = 0;
  size_t finished = 0;
  while (finished < writes.size()) {
    for (int slot = 0; slot < depth; ++slot) {
      if (busy[slot] && outcomes[slot].done) {
        EXPECT_EQ(outcomes[slot].result, static_cast<int64_t>(requests[slot].length));
        busy[slot] = false;
        ++finished;
      }
      if (!busy[slot] && next < writes.size()) {
        const PlannedWrite& write = writes[next++];
        iovs[slot] = {const_cast<unsigned char*>(write.data.data()), write.data.size()};
        outcomes[slot] = testing::Outcome();
        testing::Prepare(&requests[slot], &outcomes[slot], IoOp::kWrite, write.offset,
                         write.data.size(), &iovs[slot], 1);
        busy[slot] = true;
        queue->Submit(&requests[slot]);
      }
    }
    queue->Poll();
    if (queue->in_flight() > 0) {
      struct pollfd pfd = {queue->event_fd(), POLLIN, 0};
      poll(&pfd, 1, 100);
      queue->Poll();
    }
  }
  ASSERT_TRUE(testing::WaitIdle(*queue));
}

class Qcow2ConcurrencyTest : public Qcow2WriteTest {};

TEST_P(Qcow2ConcurrencyTest, FourThreadsFillingTheSameUnallocatedClustersAllocateEachOnce) {
  // Every cluster gets one quarter from each thread, in a different order on every thread, so
  // threads race to allocate the same clusters (with copy-on-write from the backing file).
  constexpr int kThreads = 4;
  const uint64_t cluster = GetParam().cluster_size;
  const uint64_t quarter = cluster / kThreads;
  const uint64_t clusters = 512;
  MakeImage(clusters * cluster);
  std::vector<std::vector<PlannedWrite>> plans(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (uint64_t c = 0; c < clusters; ++c) {
      plans[t].push_back({c * cluster + t * quarter,
                          testing::Pattern(quarter, static_cast<uint32_t>(c * kThreads + t))});
    }
    std::shuffle(plans[t].begin(), plans[t].end(), std::mt19937(t));
  }
  {
    auto node = OpenImageOrFail(image_, false);
    ASSERT_NE(node, nullptr);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] { WriteWithDepth(*node, plans[t], 16); });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (const auto& plan : plans) {
    for (const PlannedWrite& write : plan) testing::WriteFile(reference_, write.data, write.offset);
  }
  testing::CheckResult check = ExpectConsistentAndEqual();
  // One allocation per guest cluster: no cluster was allocated twice and leaked.
  auto json = nlohmann::json::parse(check.output, nullptr, false);
  EXPECT_EQ(json.value("allocated-clusters", uint64_t{0}), clusters) << check.output;
}

INSTANTIATE_TEST_SUITE_P(Cases, Qcow2ConcurrencyTest,
                         ::testing::Values(WriteCase{"1.1", 65536, false},
                                           WriteCase{"1.1", 65536, true},
                                           WriteCase{"1.1", 4096, true}),
                         CaseName);

}  // namespace
}  // namespace bexd::block
