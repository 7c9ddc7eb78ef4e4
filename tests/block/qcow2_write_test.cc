// SPDX-License-Identifier: GPL-2.0-or-later
// Writes through the qcow2 driver, checked by QEMU: `qemu-img check` finds no corruption and no
// leak after a clean close, and `qemu-img compare` finds the image equal to a raw file that got
// the same writes.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
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
  // An empty image of `size` bytes (over a shorter backing file with data if the case asks, so
  // that past its end the image reads zeroes), and a raw reference with the same contents.
  void MakeImage(uint64_t size) {
    std::string options = "-o compat=" + std::string(GetParam().compat) +
                          ",cluster_size=" + std::to_string(GetParam().cluster_size);
    if (GetParam().backing) {
      std::string base = dir_.CreateFile("base.raw", size - size / 4);
      testing::WriteFile(base, testing::Pattern(size - size / 4, 99), 0);
      options += " -b base.raw -F raw";
    }
    RunCommand("cd " + dir_.path() + " && qemu-img create -f qcow2 " + options + " image.qcow2 " +
               std::to_string(size) + " >/dev/null");
    image_ = testing::WithReference(dir_.path() + "/image.qcow2", dir_);
  }

  ScratchDir dir_{"qcow2"};
  testing::ImageWithReference image_;
};

TEST_P(Qcow2WriteTest, RandomAndSequentialWritesMatchARawReference) {
  MakeImage(16 * kMiB);
  {
    auto node = OpenImageOrFail(image_.image, false);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    std::mt19937_64 random(GetParam().cluster_size + GetParam().backing);
    for (int i = 0; i < 150; ++i) {
      uint64_t length = 1 + random() % (3 * GetParam().cluster_size + 5000);
      length = std::min<uint64_t>(length, 2 * kMiB);
      uint64_t offset = random() % (16 * kMiB - length);
      image_.Write(*queue, testing::Pattern(length, static_cast<uint32_t>(i)), offset);
    }
    // Sequential writes of 64 KiB from 10 MiB on.
    for (int i = 0; i < 32; ++i) {
      image_.Write(*queue, testing::Pattern(65536, 1000 + i), 10 * kMiB + i * 65536);
    }
    // Reads see what was written.
    std::vector<unsigned char> expected = testing::ReadFile(image_.reference, 0, 16 * kMiB);
    queue.reset();
    EXPECT_EQ(testing::FirstDifference(testing::ReadAll(*node), expected), -1);
  }
  image_.Verify();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Qcow2WriteTest,
    ::testing::Values(WriteCase{"0.10", 512, false}, WriteCase{"1.1", 512, true},
                      WriteCase{"1.1", 4096, false}, WriteCase{"0.10", 4096, true},
                      WriteCase{"1.1", 65536, false}, WriteCase{"1.1", 65536, true},
                      WriteCase{"0.10", 65536, false}, WriteCase{"1.1", 2 * kMiB, false},
                      WriteCase{"1.1", 2 * kMiB, true}),
    CaseName);

class Qcow2ConcurrencyTest : public Qcow2WriteTest {};

TEST_P(Qcow2ConcurrencyTest, FourThreadsFillingTheSameUnallocatedClustersAllocateEachOnce) {
  // Every cluster gets one quarter from each thread, in a different order on every thread, so
  // threads race to allocate the same clusters (with copy-on-write from the backing file).
  constexpr int kThreads = 4;
  const uint64_t cluster = GetParam().cluster_size;
  const uint64_t quarter = cluster / kThreads;
  const uint64_t clusters = 512;
  MakeImage(clusters * cluster);
  std::vector<std::vector<testing::PlannedWrite>> plans(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (uint64_t c = 0; c < clusters; ++c) {
      plans[t].push_back({c * cluster + t * quarter,
                          testing::Pattern(quarter, static_cast<uint32_t>(c * kThreads + t))});
    }
    std::shuffle(plans[t].begin(), plans[t].end(), std::mt19937(t));
  }
  {
    auto node = OpenImageOrFail(image_.image, false);
    ASSERT_NE(node, nullptr);
    testing::WriteFromThreads(*node, plans, 16);
  }
  image_.ApplyToReference(plans);
  testing::CheckResult check = image_.Verify();
  // One allocation per guest cluster: no cluster was allocated twice and leaked.
  auto json = nlohmann::json::parse(check.output, nullptr, false);
  EXPECT_EQ(json.value("allocated-clusters", uint64_t{0}), clusters) << check.output;
}

INSTANTIATE_TEST_SUITE_P(Cases, Qcow2ConcurrencyTest,
                         ::testing::Values(WriteCase{"1.1", 65536, false},
                                           WriteCase{"1.1", 65536, true},
                                           WriteCase{"1.1", 4096, true}),
                         CaseName);

class Qcow2SequentialDepthTest : public Qcow2WriteTest {};

TEST_P(Qcow2SequentialDepthTest, SmallSequentialWritesInFlightTogetherAllocateEachClusterOnce) {
  // Sixteen writes in flight on one queue, each a sixteenth of a cluster: most of them want a
  // cluster another one is allocating. Then writes of an odd size that straddle clusters.
  const uint64_t cluster = GetParam().cluster_size;
  const uint64_t clusters = std::clamp<uint64_t>(16 * kMiB / cluster, 16, 256);
  MakeImage(clusters * cluster);
  std::vector<testing::PlannedWrite> plan;
  const uint64_t small = std::max<uint64_t>(cluster / 16, 512);
  for (uint64_t offset = 0; offset < clusters / 2 * cluster; offset += small) {
    plan.push_back({offset, testing::Pattern(small, static_cast<uint32_t>(plan.size()))});
  }
  const uint64_t odd = small * 3 / 2 + 7;
  for (uint64_t offset = clusters / 2 * cluster + 1000; offset + odd <= clusters * cluster;
       offset += odd) {
    plan.push_back({offset, testing::Pattern(odd, static_cast<uint32_t>(plan.size()))});
  }
  uint64_t touched = 0;
  for (uint64_t c = 0; c < clusters; ++c) {
    touched += std::any_of(plan.begin(), plan.end(), [&](const testing::PlannedWrite& write) {
      return write.offset < (c + 1) * cluster && write.offset + write.data.size() > c * cluster;
    });
  }
  {
    auto node = OpenImageOrFail(image_.image, false);
    ASSERT_NE(node, nullptr);
    testing::WriteWithDepth(*node, plan, 16);
    std::vector<std::vector<testing::PlannedWrite>> plans = {plan};
    image_.ApplyToReference(plans);
    std::vector<unsigned char> expected =
        testing::ReadFile(image_.reference, 0, clusters * cluster);
    EXPECT_EQ(testing::FirstDifference(testing::ReadAll(*node), expected), -1);
  }
  testing::CheckResult check = image_.Verify();
  auto json = nlohmann::json::parse(check.output, nullptr, false);
  EXPECT_EQ(json.value("allocated-clusters", uint64_t{0}), touched) << check.output;
}

INSTANTIATE_TEST_SUITE_P(Cases, Qcow2SequentialDepthTest,
                         ::testing::Values(WriteCase{"1.1", 65536, false},
                                           WriteCase{"1.1", 65536, true},
                                           WriteCase{"0.10", 65536, false},
                                           WriteCase{"1.1", 4096, true},
                                           WriteCase{"1.1", 2 * kMiB, false}),
                         CaseName);

// An empty 8 MiB image and its raw reference.
class Qcow2FlushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RunCommand("qemu-img create -f qcow2 " + path_ + " 8M >/dev/null");
    image_ = testing::WithReference(path_, dir_);
  }
  ScratchDir dir_{"qcow2"};
  std::string path_ = dir_.path() + "/image.qcow2";
  testing::ImageWithReference image_;
  testing::ImageOptions options_;
};

TEST_F(Qcow2FlushTest, FuaWritesFlushesAndCacheCleaningKeepEverything) {
  options_.qcow2.cache_clean_interval = 1;
  {
    auto node = OpenImageOrFail(path_, false, options_);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    // A FUA write that allocates (metadata pending), then one into the allocated cluster.
    std::vector<unsigned char> first = testing::Pattern(70000, 1);
    ASSERT_EQ(WriteAt(*queue, first.data(), first.size(), 100, kIoFua), 70000);
    testing::WriteFile(image_.reference, first, 100);
    EXPECT_EQ(testing::RunOne(*queue, IoOp::kFlush, 0, 0), 0);
    std::vector<unsigned char> second = testing::Pattern(4096, 2);
    ASSERT_EQ(WriteAt(*queue, second.data(), second.size(), 8192, kIoFua), 4096);
    testing::WriteFile(image_.reference, second, 8192);
    // Unused cache entries are dropped after the interval; reads and writes load them again.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    image_.Write(*queue, testing::Pattern(5000, 3), 3 * kMiB);
    std::vector<unsigned char> expected = testing::ReadFile(image_.reference, 0, 8 * kMiB);
    queue.reset();
    EXPECT_EQ(testing::FirstDifference(testing::ReadAll(*node), expected), -1);
  }
  image_.Verify();
}

TEST_F(Qcow2FlushTest, LazyRefcountsKeepTheImageDirtyUntilACleanClose) {
  options_.qcow2.lazy_refcounts = true;
  {
    auto node = OpenImageOrFail(path_, false, options_);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    for (int i = 0; i < 20; ++i) {
      image_.Write(*queue, testing::Pattern(30000, i), static_cast<uint64_t>(i) * 300000);
    }
    EXPECT_EQ(testing::RunOne(*queue, IoOp::kFlush, 0, 0), 0);
    // Open and flushed: the header says refcounts may lag behind.
    std::vector<unsigned char> features = testing::ReadFile(path_, 72, 8);
    EXPECT_EQ(features[7] & 1, 1);
  }
  std::vector<unsigned char> features = testing::ReadFile(path_, 72, 8);
  EXPECT_EQ(features[7] & 1, 0);
  image_.Verify();
}

}  // namespace
}  // namespace bexd::block
