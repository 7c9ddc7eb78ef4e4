// SPDX-License-Identifier: GPL-2.0-or-later
// The metadata caches: QEMU's size options, and data staying right when tiny caches evict (and
// write back) tables under concurrent I/O.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "block/qcow2/backing_name.h"
#include "block/qcow2/cache_sizes.h"
#include "tests/block/file_fixture.h"
#include "tests/block/qcow2_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::RunCommand;
using testing::ScratchDir;

constexpr uint64_t kMiB = 1 << 20;

TEST(Qcow2CacheSizesTest, DefaultsMapTheWholeImageUpTo32MiB) {
  qcow2::Geometry g = qcow2::Geometry::Make(16, false, 4);
  Qcow2Options options;
  // 32 GiB with 64 KiB clusters: 4 MiB of L2 tables, 64 of them.
  auto sizes = qcow2::ComputeCacheSizes(options, g, uint64_t{32} << 30);
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ(sizes->l2_tables, 64u);
  EXPECT_EQ(sizes->refcount_blocks, 4u);
  // 1 TiB: capped at 32 MiB (512 tables, enough for 256 GiB).
  sizes = qcow2::ComputeCacheSizes(options, g, uint64_t{1} << 40);
  EXPECT_EQ(sizes->l2_tables, 512u);
  // A tiny image still gets two tables.
  sizes = qcow2::ComputeCacheSizes(options, g, kMiB);
  EXPECT_EQ(sizes->l2_tables, 2u);
}

TEST(Qcow2CacheSizesTest, OptionsAsQemuReadsThem) {
  qcow2::Geometry g = qcow2::Geometry::Make(16, false, 4);
  Qcow2Options options;
  options.l2_cache_size = 1 * kMiB;
  options.refcount_cache_size = 512 * 1024;
  auto sizes = qcow2::ComputeCacheSizes(options, g, uint64_t{32} << 30);
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ(sizes->l2_tables, 16u);
  EXPECT_EQ(sizes->refcount_blocks, 8u);
  // cache-size: the L2 cache takes what it needs, the refcount cache the rest.
  Qcow2Options combined;
  combined.cache_size = 8 * kMiB;
  sizes = qcow2::ComputeCacheSizes(combined, g, uint64_t{32} << 30);
  EXPECT_EQ(sizes->l2_tables, 64u);
  EXPECT_EQ(sizes->refcount_blocks, 64u);
  combined.l2_cache_size = 1 * kMiB;
  combined.refcount_cache_size = 1 * kMiB;
  EXPECT_FALSE(qcow2::ComputeCacheSizes(combined, g, kMiB).ok());

  // l2-cache-entry-size: a power of two from 512 to the cluster size (64 KiB here).
  Qcow2Options entry;
  for (uint64_t good : {512u, 4096u, 65536u}) {
    entry.l2_cache_entry_size = good;
    EXPECT_TRUE(qcow2::ComputeCacheSizes(entry, g, kMiB).ok()) << good;
  }
  for (uint64_t bad : {256u, 3000u, 131072u}) {
    entry.l2_cache_entry_size = bad;
    auto refused = qcow2::ComputeCacheSizes(entry, g, kMiB);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().message(),
              "L2 cache entry size must be a power of two between 512 and the cluster size "
              "(65536)");
  }
}

TEST(Qcow2BackingNameTest, ResolvesAsQemu) {
  EXPECT_EQ(*qcow2::ResolveBackingFileName("/images/top.qcow2", "base.qcow2"),
            "/images/base.qcow2");
  EXPECT_EQ(*qcow2::ResolveBackingFileName("/images/top.qcow2", "../b/base.raw"),
            "/images/../b/base.raw");
  EXPECT_EQ(*qcow2::ResolveBackingFileName("/images/top.qcow2", "/abs/base"), "/abs/base");
  EXPECT_EQ(*qcow2::ResolveBackingFileName("top.qcow2", "base.qcow2"), "base.qcow2");
  EXPECT_EQ(*qcow2::ResolveBackingFileName("dir/top.qcow2", "file:base.qcow2"), "dir/base.qcow2");
  auto protocol = qcow2::ResolveBackingFileName("/images/top.qcow2", "nbd://host/export");
  EXPECT_EQ(protocol.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_FALSE(qcow2::ResolveBackingFileName("/images/top.qcow2", "").ok());
}

TEST(Qcow2CacheTest, TinyCachesKeepDataRightUnderConcurrentReadsAndWrites) {
  // 4 KiB clusters: one L2 table maps 2 MiB, so 64 MiB needs 32 tables; the cache holds 2 and 4
  // refcount blocks, so tables are evicted, written back and reloaded all the time.
  ScratchDir dir("qcow2");
  std::string image = dir.path() + "/image.qcow2";
  RunCommand("qemu-img create -f qcow2 -o cluster_size=4096 " + image + " 64M >/dev/null");
  testing::ImageWithReference pair = testing::WithReference(image, dir);
  testing::ImageOptions options;
  options.qcow2.l2_cache_size = 2 * 4096;
  options.qcow2.refcount_cache_size = 4 * 4096;
  constexpr int kThreads = 4;
  // Thread t writes into the 1 MiB bands t, t+4, t+8...: the threads share tables, never bytes.
  std::vector<std::vector<testing::PlannedWrite>> plans(kThreads);
  std::mt19937_64 random(7);
  for (int i = 0; i < 800; ++i) {
    int thread = i % kThreads;
    uint64_t band = (random() % 16) * kThreads + thread;
    uint64_t length = 1 + random() % 20000;
    uint64_t offset = band * kMiB + random() % (kMiB - length);
    plans[thread].push_back({offset, testing::Pattern(length, i)});
  }
  {
    auto node = testing::OpenImageOrFail(image, false, options);
    ASSERT_NE(node, nullptr);
    testing::WriteFromThreads(*node, plans, 8);
    pair.ApplyToReference(plans);
    // Reads from all threads at once see every write.
    std::vector<unsigned char> expected = testing::ReadFile(pair.reference, 0, 64 * kMiB);
    std::vector<std::thread> readers;
    for (int t = 0; t < kThreads; ++t) {
      readers.emplace_back([&, t] {
        auto queue = testing::MakeQueue(*node);
        std::vector<unsigned char> buffer(kMiB);
        for (uint64_t band = t; band < 64; band += kThreads) {
          ASSERT_EQ(testing::ReadAt(*queue, buffer.data(), kMiB, band * kMiB),
                    static_cast<int64_t>(kMiB));
          ASSERT_EQ(std::memcmp(buffer.data(), expected.data() + band * kMiB, kMiB), 0)
              << "band " << band;
        }
      });
    }
    for (std::thread& reader : readers) reader.join();
  }
  pair.Verify();
}

}  // namespace
}  // namespace bexd::block
