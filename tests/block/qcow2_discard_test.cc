// SPDX-License-Identifier: GPL-2.0-or-later
// Discard, write-zeroes and block status, checked with `qemu-img map` and `qemu-img check`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/block/file_fixture.h"
#include "tests/block/qcow2_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::MakeQueue;
using testing::OpenImageOrFail;
using testing::RunCommand;
using testing::RunOne;
using testing::ScratchDir;
using testing::WriteAt;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kCluster = 65536;

// One extent of `qemu-img map --output=json`.
struct MapExtent {
  uint64_t start;
  uint64_t length;
  bool data;
  bool zero;
  int depth;
};

std::vector<MapExtent> QemuMap(const std::string& image) {
  auto json = nlohmann::json::parse(RunCommand("qemu-img map -U --output=json " + image));
  std::vector<MapExtent> extents;
  for (const auto& item : json) {
    extents.push_back({item["start"], item["length"], item["data"], item["zero"], item["depth"]});
  }
  return extents;
}

// The map's entry for `offset`.
MapExtent MapAt(const std::vector<MapExtent>& map, uint64_t offset) {
  for (const MapExtent& extent : map) {
    if (offset >= extent.start && offset < extent.start + extent.length) return extent;
  }
  ADD_FAILURE() << "no map entry for " << offset;
  return {};
}

uint64_t AllocatedClusters(const std::string& image) {
  auto json = nlohmann::json::parse(testing::QemuCheck(image).output, nullptr, false);
  return json.value("allocated-clusters", uint64_t{0});
}

uint64_t DiskBytes(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

class Qcow2DiscardTest : public ::testing::Test {
 protected:
  // An 8 MiB version 3 image with every cluster allocated.
  std::string FullImage(const std::string& extra_options = "") {
    std::string image = dir_.path() + "/image.qcow2";
    RunCommand("qemu-img create -f qcow2 " + extra_options + " " + image + " 8M >/dev/null");
    RunCommand("qemu-io -f qcow2 -c 'write -P 0x99 0 8M' " + image);
    return image;
  }

  std::shared_ptr<BlockNode> Open(const std::string& image, DiscardMode discard) {
    testing::ImageOptions options;
    options.qcow2.discard = discard;
    return OpenImageOrFail(image, false, options);
  }

  ScratchDir dir_{"qcow2"};
};

TEST_F(Qcow2DiscardTest, DiscardUnmapFreesWholeClustersAndPunchesTheFile) {
  std::string image = FullImage();
  uint64_t disk_before = DiskBytes(image);
  {
    auto node = Open(image, DiscardMode::kUnmap);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    // 1 MiB at 1 MiB, and a range that covers only part of its first and last clusters.
    EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, kMiB, kMiB), static_cast<int64_t>(kMiB));
    EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 4 * kMiB + 1000, 3 * kCluster),
              static_cast<int64_t>(3 * kCluster));
    EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  }
  std::vector<MapExtent> map = QemuMap(image);
  MapExtent discarded = MapAt(map, kMiB);
  EXPECT_FALSE(discarded.data);
  EXPECT_TRUE(discarded.zero);
  EXPECT_EQ(discarded.start, kMiB);
  EXPECT_EQ(discarded.length, kMiB);
  // Whole clusters only: the partial ones keep their data.
  EXPECT_TRUE(MapAt(map, 4 * kMiB).data);
  EXPECT_FALSE(MapAt(map, 4 * kMiB + kCluster).data);
  EXPECT_TRUE(MapAt(map, 4 * kMiB + 3 * kCluster).data);
  EXPECT_EQ(AllocatedClusters(image), 8 * kMiB / kCluster - 16 - 2);
  testing::CheckResult check = testing::QemuCheck(image);
  EXPECT_EQ(check.corruptions, 0u) << check.output;
  EXPECT_EQ(check.leaks, 0u) << check.output;
  // The freed clusters went back to the file system.
  EXPECT_LE(DiskBytes(image) + kMiB, disk_before);
  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  EXPECT_EQ(contents[kMiB], 0);
  EXPECT_EQ(contents[4 * kMiB + 1000], 0x99);
}

// pass-discard-request=off (QEMU's): discard=unmap frees the clusters in the image, but the file
// keeps their space (a file system that must not be punched, or a thin device kept thick).
TEST_F(Qcow2DiscardTest, PassDiscardRequestOffFreesClustersButKeepsTheFilesSpace) {
  std::string image = FullImage();
  uint64_t disk_before = DiskBytes(image);
  {
    testing::ImageOptions options;
    options.qcow2.discard = DiscardMode::kUnmap;
    options.qcow2.pass_discard_request = false;
    auto node = OpenImageOrFail(image, false, options);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, kMiB, kMiB), static_cast<int64_t>(kMiB));
    EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  }
  EXPECT_FALSE(MapAt(QemuMap(image), kMiB).data);
  EXPECT_EQ(AllocatedClusters(image), 8 * kMiB / kCluster - 16);
  testing::CheckResult check = testing::QemuCheck(image);
  EXPECT_EQ(check.corruptions, 0u) << check.output;
  EXPECT_EQ(check.leaks, 0u) << check.output;
  EXPECT_GE(DiskBytes(image), disk_before);
}

// pass-discard-other=on: clusters freed by other means than a discard (here compressed clusters
// that writes replace) are punched out of the file too; off (the default), they stay.
TEST_F(Qcow2DiscardTest, PassDiscardOtherPunchesClustersThatWritesFree) {
  const std::string raw = dir_.path() + "/text.raw";
  // Text compresses to about three quarters: the clusters stay compressed, and take space.
  RunCommand("head -c 6291456 /dev/urandom | base64 -w 0 | head -c 8388608 > " + raw);
  uint64_t disk_after[2] = {0, 0};
  for (bool pass_other : {false, true}) {
    const std::string image = dir_.path() + (pass_other ? "/other.qcow2" : "/kept.qcow2");
    RunCommand("qemu-img convert -c -f raw -O qcow2 " + raw + " " + image);
    {
      testing::ImageOptions options;
      options.qcow2.discard = DiscardMode::kUnmap;  // the fixture's file child takes discards
      options.qcow2.pass_discard_other = pass_other;
      auto node = OpenImageOrFail(image, false, options);
      ASSERT_NE(node, nullptr);
      auto queue = MakeQueue(*node);
      const std::vector<unsigned char> data = testing::Pattern(kMiB, 7);
      for (uint64_t offset = 0; offset < 8 * kMiB; offset += kMiB) {
        ASSERT_EQ(WriteAt(*queue, data.data(), data.size(), offset), static_cast<int64_t>(kMiB));
      }
      EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
    }
    testing::CheckResult check = testing::QemuCheck(image);
    EXPECT_EQ(check.corruptions, 0u) << check.output;
    EXPECT_EQ(check.leaks, 0u) << check.output;
    disk_after[pass_other] = DiskBytes(image);
  }
  // About 6 MiB of compressed clusters were freed in both; only pass-discard-other gave it back.
  EXPECT_LE(disk_after[1] + 4 * kMiB, disk_after[0]);
}

TEST_F(Qcow2DiscardTest, DiscardIgnoreChangesNothing) {
  std::string image = FullImage();
  std::string map_before = RunCommand("qemu-img map --output=json " + image);
  {
    auto node = Open(image, DiscardMode::kIgnore);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 0, 2 * kMiB), static_cast<int64_t>(2 * kMiB));
  }
  EXPECT_EQ(RunCommand("qemu-img map --output=json " + image), map_before);
}

// What the FUSE core asks before it sends a request down: a writable image does everything but
// discard, which needs discard=unmap; a read-only one only reads and tells holes from data.
TEST_F(Qcow2DiscardTest, CapabilitiesFollowTheOptions) {
  std::string image = FullImage();
  {
    auto node = Open(image, DiscardMode::kUnmap);
    ASSERT_NE(node, nullptr);
    const Capabilities capabilities = node->capabilities();
    EXPECT_TRUE(capabilities.discard && capabilities.write_zeroes && capabilities.block_status &&
                capabilities.flush && capabilities.fua && capabilities.resize);
  }
  {
    auto node = Open(image, DiscardMode::kIgnore);
    ASSERT_NE(node, nullptr);
    EXPECT_FALSE(node->capabilities().discard);
    EXPECT_TRUE(node->capabilities().write_zeroes);
  }
  auto node = testing::OpenImageOrFail(image, /*read_only=*/true);
  ASSERT_NE(node, nullptr);
  const Capabilities capabilities = node->capabilities();
  EXPECT_TRUE(capabilities.block_status);
  EXPECT_FALSE(capabilities.discard || capabilities.write_zeroes || capabilities.flush ||
               capabilities.resize);
}

TEST_F(Qcow2DiscardTest, WriteZeroesSetsZeroFlagsAndUnmapsOnlyWhenAllowed) {
  std::string image = FullImage();
  uint64_t clusters = AllocatedClusters(image);
  {
    auto node = Open(image, DiscardMode::kUnmap);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    // Keeps its clusters (preallocated zero clusters), then one that may unmap them, then a
    // partial range that is written as zeroes.
    EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 0, kMiB), static_cast<int64_t>(kMiB));
    EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 2 * kMiB, kMiB, nullptr, 0, kIoMayUnmap),
              static_cast<int64_t>(kMiB));
    EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 5 * kMiB + 100, 1000), static_cast<int64_t>(1000));
  }
  std::vector<MapExtent> map = QemuMap(image);
  EXPECT_TRUE(MapAt(map, 0).zero);
  EXPECT_FALSE(MapAt(map, 0).data);
  EXPECT_TRUE(MapAt(map, 2 * kMiB).zero);
  EXPECT_TRUE(MapAt(map, 5 * kMiB).data);
  // Only the unmapped megabyte gave its clusters back.
  EXPECT_EQ(AllocatedClusters(image), clusters - kMiB / kCluster);
  testing::CheckResult check = testing::QemuCheck(image);
  EXPECT_EQ(check.corruptions, 0u) << check.output;
  EXPECT_EQ(check.leaks, 0u) << check.output;
  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  std::vector<unsigned char> expected(8 * kMiB, 0x99);
  std::fill(expected.begin(), expected.begin() + kMiB, 0);
  std::fill(expected.begin() + 2 * kMiB, expected.begin() + 3 * kMiB, 0);
  std::fill(expected.begin() + 5 * kMiB + 100, expected.begin() + 5 * kMiB + 1100, 0);
  EXPECT_EQ(testing::FirstDifference(contents, expected), -1);
}

TEST_F(Qcow2DiscardTest, WriteZeroesOnVersion2WritesZeroes) {
  std::string image = FullImage("-o compat=0.10");
  {
    auto node = Open(image, DiscardMode::kUnmap);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, kMiB, kMiB, nullptr, 0, kIoMayUnmap),
              static_cast<int64_t>(kMiB));
  }
  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  EXPECT_EQ(contents[kMiB], 0);
  EXPECT_EQ(contents[2 * kMiB - 1], 0);
  EXPECT_EQ(contents[2 * kMiB], 0x99);
  EXPECT_EQ(testing::QemuCheck(image).corruptions, 0u);
}

TEST_F(Qcow2DiscardTest, WriteZeroesAndDiscardHideTheBackingFile) {
  std::string base = dir_.path() + "/base.qcow2";
  std::string image = dir_.path() + "/top.qcow2";
  RunCommand("qemu-img create -f qcow2 " + base +
             " 4M >/dev/null && qemu-io -f qcow2 -c "
             "'write -P 0x12 0 4M' " +
             base);
  RunCommand("qemu-img create -f qcow2 -b base.qcow2 -F qcow2 " + image + " 4M >/dev/null");
  {
    auto node = Open(image, DiscardMode::kUnmap);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 0, kMiB), static_cast<int64_t>(kMiB));
    EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 2 * kMiB, kMiB), static_cast<int64_t>(kMiB));
  }
  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  EXPECT_EQ(contents[0], 0);
  EXPECT_EQ(contents[2 * kMiB], 0);
  EXPECT_EQ(contents[kMiB], 0x12);
  testing::CheckResult check = testing::QemuCheck(image);
  EXPECT_EQ(check.corruptions, 0u) << check.output;
  EXPECT_EQ(check.leaks, 0u) << check.output;
}

// Block status: data, zero clusters, unallocated clusters that read from a backing file (which
// answer for their own range), and unallocated clusters past the backing file's end, as
// `qemu-img map` describes them.
TEST_F(Qcow2DiscardTest, BlockStatusAgreesWithQemuImgMap) {
  std::string base = dir_.path() + "/base.qcow2";
  std::string image = dir_.path() + "/top.qcow2";
  RunCommand("qemu-img create -f qcow2 " + base +
             " 6M >/dev/null && qemu-io -f qcow2 -c "
             "'write -P 1 0 1M' -c 'write -P 2 3M 1M' " +
             base);
  RunCommand("qemu-img create -f qcow2 -b base.qcow2 -F qcow2 " + image +
             " 8M >/dev/null && qemu-io -f qcow2 -c 'write -P 3 512k 1M' -c 'write -z 3M 256k' " +
             "-c 'write -c -P 4 6M 64k' " + image);
  std::vector<MapExtent> map = QemuMap(image);
  auto node = OpenImageOrFail(image, true);
  ASSERT_NE(node, nullptr);
  auto queue = MakeQueue(*node);
  uint64_t offset = 0;
  int extents = 0;
  while (offset < node->size()) {
    bool data = false;
    int64_t length =
        RunOne(*queue, IoOp::kBlockStatus, offset, node->size() - offset, nullptr, 0, 0, &data);
    ASSERT_GT(length, 0) << "at " << offset;
    for (uint64_t at = offset; at < offset + static_cast<uint64_t>(length); at += kCluster) {
      EXPECT_EQ(data, MapAt(map, at).data) << "at " << at;
    }
    offset += static_cast<uint64_t>(length);
    ++extents;
  }
  EXPECT_GE(extents, 6);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, node->size(), 4096), 0);
}

}  // namespace
}  // namespace bexd::block
