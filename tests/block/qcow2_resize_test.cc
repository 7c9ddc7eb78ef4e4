// SPDX-License-Identifier: GPL-2.0-or-later
// Resizing a qcow2 node: growing (with a larger L1 table when needed), shrinking (the clusters
// past the new end freed, as QEMU does), sizes in whole sectors only, checked with qemu-img.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/block/file_fixture.h"
#include "tests/block/qcow2_fixture.h"
#include "tests/block/queue_runner.h"
#include "tests/support/loop_device.h"
#include "tests/support/qemu_check.h"

namespace bexd::block {
namespace {

using testing::MakeQueue;
using testing::OpenImageOrFail;
using testing::RunCommand;
using testing::ScratchDir;

constexpr uint64_t kMiB = 1 << 20;

uint64_t QemuVirtualSize(const std::string& image) {
  auto json = nlohmann::json::parse(RunCommand("qemu-img info -U --output=json " + image));
  return json["virtual-size"];
}

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return uint64_t(st.st_blocks) * 512;
}

void ExpectClean(const std::string& image) {
  bexd::testing::CheckResult check = bexd::testing::QemuCheck(image);
  EXPECT_EQ(check.exit_status, 0) << check.output;
  EXPECT_EQ(check.corruptions, 0u) << check.output;
  EXPECT_EQ(check.leaks, 0u) << check.output;
}

class Qcow2ResizeTest : public ::testing::Test {
 protected:
  ScratchDir dir_{"qcow2"};
};

TEST_F(Qcow2ResizeTest, GrowingPastTheL1TableMovesItAndTheNewSpaceTakesWrites) {
  // 512-byte clusters: one L1 entry maps 32 KiB, so growing from 1 MiB to 40 MiB needs an L1
  // table of 1280 entries instead of 32.
  std::string image = dir_.path() + "/image.qcow2";
  RunCommand("qemu-img create -f qcow2 -o cluster_size=512 " + image + " 1M >/dev/null");
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x21 0 1M' " + image);
  testing::ImageWithReference pair = testing::WithReference(image, dir_);
  {
    auto node = OpenImageOrFail(image, false);
    ASSERT_NE(node, nullptr);
    ASSERT_TRUE(node->Truncate(40 * kMiB).ok());
    EXPECT_EQ(node->size(), 40 * kMiB);
    RunCommand("truncate -s 40M " + pair.reference);
    auto queue = MakeQueue(*node);
    pair.Write(*queue, testing::Pattern(100000, 1), 40 * kMiB - 100000);
    pair.Write(*queue, testing::Pattern(5000, 2), 1000);
    pair.Write(*queue, testing::Pattern(3 * kMiB, 3), 20 * kMiB);
  }
  EXPECT_EQ(QemuVirtualSize(image), 40 * kMiB);
  pair.Verify();
}

// The new L1 table goes past the end of the file; with 512-byte clusters one refcount block
// covers 128 KiB, less than the file grows ahead, which once made each try land in another range
// without a block: the file ballooned to ~95 GiB and the resize failed with EFBIG.
TEST_F(Qcow2ResizeTest, GrowingTheL1TableWithSmallClustersKeepsTheFileSmall) {
  std::string image = dir_.path() + "/image.qcow2";
  RunCommand("qemu-img create -f qcow2 -o cluster_size=512 " + image + " 4M >/dev/null");
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x5a 0 1120k' " + image);
  {
    auto node = OpenImageOrFail(image, false);
    ASSERT_NE(node, nullptr);
    absl::Status status = node->Truncate(8 * kMiB);
    ASSERT_TRUE(status.ok()) << status;
    status = node->Truncate(64 * kMiB);
    ASSERT_TRUE(status.ok()) << status;
  }
  struct stat st {};
  ASSERT_EQ(::stat(image.c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_size), 8 * kMiB) << "the image file ballooned";
  EXPECT_EQ(QemuVirtualSize(image), 64 * kMiB);
  ExpectClean(image);
  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  ASSERT_EQ(contents.size(), 64 * kMiB);
  EXPECT_EQ(std::count(contents.begin(), contents.begin() + 1120 * 1024, 0x5a), 1120 * 1024);
  EXPECT_EQ(std::count(contents.begin() + 1120 * 1024, contents.end(), 0),
            long(64 * kMiB - 1120 * 1024));
}

// With 512-byte clusters a refcount block covers 256 clusters, and an L1 table for 2 GiB takes
// 1024: the new table's run spans ranges without a block wherever it starts. Placing each missing
// block in its own range split the run, so every try moved on and met another such range: the
// resize never finished while the file grew by gigabytes a second.
TEST_F(Qcow2ResizeTest, AnL1TableLargerThanARefcountBlockCoversFindsRoomAtOnce) {
  std::string image = dir_.path() + "/image.qcow2";
  RunCommand("qemu-img create -f qcow2 -o cluster_size=512 " + image + " 8M >/dev/null");
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  {
    auto node = OpenImageOrFail(image, false);
    ASSERT_NE(node, nullptr);
    absl::Status status = node->Truncate(2 * kGiB);
    ASSERT_TRUE(status.ok()) << status;
    auto queue = MakeQueue(*node);
    std::vector<uint8_t> start(4096, 0x53);
    std::vector<uint8_t> end(4096, 0x45);
    ASSERT_EQ(testing::WriteAt(*queue, start.data(), start.size(), 0), 4096);
    ASSERT_EQ(testing::WriteAt(*queue, end.data(), end.size(), 2 * kGiB - 4096), 4096);
  }
  struct stat st {};
  ASSERT_EQ(::stat(image.c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_size), 8 * kMiB) << "the image file ballooned";
  EXPECT_EQ(QemuVirtualSize(image), 2 * kGiB);
  ExpectClean(image);
  std::string reads = RunCommand("qemu-io -f qcow2 -c 'read -P 0x53 0 4096' -c 'read -P 0x45 " +
                                 std::to_string(2 * kGiB - 4096) + " 4096' " + image);
  EXPECT_EQ(reads.find("Pattern verification failed"), std::string::npos) << reads;
  EXPECT_NE(reads.find("read 4096/4096 bytes at offset 0"), std::string::npos) << reads;
  EXPECT_NE(reads.find("read 4096/4096 bytes at offset 2147479552"), std::string::npos) << reads;
}

// On a block device the image cannot grow past the device's end, where the new L1 table used to
// go: every grow that needed a larger L1 table failed with ENOSPC. It now takes free clusters
// inside the device, as QEMU does.
TEST_F(Qcow2ResizeTest, OnABlockDeviceTheLargerL1TableGoesIntoFreeClusters) {
  std::string backing = dir_.path() + "/device.img";
  RunCommand("truncate -s 64M " + backing);
  bexd::testing::LoopDevice loop(backing);
  if (loop.path().empty()) GTEST_SKIP() << "losetup is not available (needs root and loop)";
  RunCommand("qemu-img create -f qcow2 " + loop.path() + " 600M >/dev/null");
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x33 0 1M' " + loop.path());
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  {
    auto node = OpenImageOrFail(loop.path(), false);
    ASSERT_NE(node, nullptr);
    absl::Status status = node->Truncate(100 * kGiB);
    ASSERT_TRUE(status.ok()) << status;
    auto queue = MakeQueue(*node);
    std::vector<uint8_t> end(65536, 0x45);
    ASSERT_EQ(testing::WriteAt(*queue, end.data(), end.size(), 100 * kGiB - 65536), 65536);
  }
  EXPECT_EQ(QemuVirtualSize(loop.path()), 100 * kGiB);
  ExpectClean(loop.path());
  std::string reads = RunCommand("qemu-io -f qcow2 -c 'read -P 0x33 0 1M' -c 'read -P 0x45 " +
                                 std::to_string(100 * kGiB - 65536) + " 64k' " + loop.path());
  EXPECT_EQ(reads.find("Pattern verification failed"), std::string::npos) << reads;
  EXPECT_NE(reads.find("read 1048576/1048576 bytes at offset 0"), std::string::npos) << reads;
  EXPECT_NE(reads.find("read 65536/65536 bytes at offset 107374116864"), std::string::npos)
      << reads;
}

TEST_F(Qcow2ResizeTest, GrowingReadsZeroesEvenWhereTheBackingFileIsLonger) {
  std::string base = dir_.path() + "/base.qcow2";
  std::string image = dir_.path() + "/top.qcow2";
  RunCommand("qemu-img create -f qcow2 " + base +
             " 8M >/dev/null && qemu-io -f qcow2 -c 'write "
             "-P 0x31 0 8M' " +
             base);
  // Not a multiple of the cluster size (qemu-img rounds it to 3000320).
  RunCommand("qemu-img create -f qcow2 -b base.qcow2 -F qcow2 " + image + " 3000000 >/dev/null");
  uint64_t old_size = 0;
  {
    auto node = OpenImageOrFail(image, false);
    ASSERT_NE(node, nullptr);
    old_size = node->size();
    ASSERT_TRUE(node->Truncate(6 * kMiB).ok());
    std::vector<unsigned char> data = testing::ReadAll(*node);
    ASSERT_EQ(data.size(), 6 * kMiB);
    EXPECT_EQ(data[old_size - 1], 0x31);
    for (uint64_t i = old_size; i < data.size(); i += 4000) ASSERT_EQ(data[i], 0) << i;
  }
  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  EXPECT_EQ(contents[old_size - 1], 0x31);
  EXPECT_EQ(contents[old_size], 0);
  EXPECT_EQ(contents[6 * kMiB - 1], 0);
  testing::CheckResult check = testing::QemuCheck(image);
  EXPECT_EQ(check.corruptions, 0u) << check.output;
  EXPECT_EQ(check.leaks, 0u) << check.output;
}

TEST_F(Qcow2ResizeTest, ShrinkingOverDataFreesTheClustersPastTheEnd) {
  // Data clusters, a compressed cluster and a zero cluster past the new end, which is neither
  // cluster- nor 4096-aligned; growing again must read zeroes there, not the old data.
  std::string image = dir_.path() + "/image.qcow2";
  RunCommand("qemu-img create -f qcow2 " + image + " 8M >/dev/null");
  RunCommand(
      "qemu-io -f qcow2 -c 'write -P 0x41 1M 1M' -c 'write -P 0x42 5M 2M' -c 'write -c -P "
      "0x43 7M 64k' -c 'write -z 7340032 64k' " +
      image);
  const uint64_t new_size = 1536 * 1024 + 512;
  const uint64_t allocated_before = AllocatedBytes(image);
  {
    auto node = OpenImageOrFail(image, false);
    ASSERT_NE(node, nullptr);
    absl::Status status = node->Truncate(new_size);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(node->size(), new_size);
    auto queue = MakeQueue(*node);
    std::vector<unsigned char> byte(1);
    EXPECT_EQ(testing::ReadAt(*queue, byte.data(), 1, new_size), -EINVAL);
  }
  EXPECT_EQ(QemuVirtualSize(image), new_size);
  ExpectClean(image);
  // 2.5 MiB of data past the end went back to the file system (2 MiB of it at least).
  EXPECT_LT(AllocatedBytes(image) + 2 * kMiB, allocated_before)
      << "before " << allocated_before << ", after " << AllocatedBytes(image);
  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  ASSERT_EQ(contents.size(), new_size);
  EXPECT_EQ(std::count(contents.begin() + kMiB, contents.end(), 0x41), long(new_size - kMiB));

  {
    auto node = OpenImageOrFail(image, false);
    ASSERT_NE(node, nullptr);
    ASSERT_TRUE(node->Truncate(8 * kMiB).ok());
  }
  ExpectClean(image);
  contents = testing::QemuContents(image, dir_);
  ASSERT_EQ(contents.size(), 8 * kMiB);
  EXPECT_EQ(std::count(contents.begin() + kMiB, contents.begin() + new_size, 0x41),
            long(new_size - kMiB));
  EXPECT_EQ(std::count(contents.begin() + new_size, contents.end(), 0), long(8 * kMiB - new_size));
}

TEST_F(Qcow2ResizeTest, ShrinkingAnOverlayKeepsItsBackingFileFromShowingThroughAfterAGrow) {
  std::string base = dir_.path() + "/base.qcow2";
  std::string image = dir_.path() + "/top.qcow2";
  RunCommand("qemu-img create -f qcow2 " + base + " 8M >/dev/null");
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x31 0 8M' " + base);
  RunCommand("qemu-img create -f qcow2 -b base.qcow2 -F qcow2 " + image + " 8M >/dev/null");
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x51 4M 1M' " + image);
  {
    auto node = OpenImageOrFail(image, false);
    ASSERT_NE(node, nullptr);
    ASSERT_TRUE(node->Truncate(2 * kMiB).ok());
    ASSERT_TRUE(node->Truncate(8 * kMiB).ok());
    std::vector<unsigned char> data = testing::ReadAll(*node);
    ASSERT_EQ(data.size(), 8 * kMiB);
    EXPECT_EQ(std::count(data.begin(), data.begin() + 2 * kMiB, 0x31), long(2 * kMiB));
    EXPECT_EQ(std::count(data.begin() + 2 * kMiB, data.end(), 0), long(6 * kMiB));
  }
  ExpectClean(image);
  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  EXPECT_EQ(std::count(contents.begin(), contents.begin() + 2 * kMiB, 0x31), long(2 * kMiB));
  EXPECT_EQ(std::count(contents.begin() + 2 * kMiB, contents.end(), 0), long(6 * kMiB));
}

TEST_F(Qcow2ResizeTest, SizesThatAreNotWholeSectorsAreRefused) {
  // QEMU would round such a size in the header down and lose the tail, so bexd never writes one.
  std::string image = dir_.path() + "/image.qcow2";
  RunCommand("qemu-img create -f qcow2 " + image + " 1M >/dev/null");
  auto node = OpenImageOrFail(image, false);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->capabilities().size_alignment, 512u);
  for (uint64_t size : {uint64_t{2 * kMiB + 100}, uint64_t{kMiB - 1}}) {
    absl::Status status = node->Truncate(size);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("multiple of 512"), std::string::npos) << status;
    EXPECT_EQ(node->size(), kMiB);
  }
}

// As QEMU 7.2: a version 3 snapshot keeps its own size, so the active layer may shrink below it;
// the snapshot's clusters stay, and reverting to it brings back its size and data.
TEST_F(Qcow2ResizeTest, ImagesWithInternalSnapshotsShrinkAndTheSnapshotKeepsItsData) {
  std::string image = dir_.path() + "/image.qcow2";
  RunCommand("qemu-img create -f qcow2 " + image + " 8M >/dev/null");
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x41 0 8M' " + image);
  RunCommand("qemu-img snapshot -c first " + image);
  // Clusters of the active layer alone, on both sides of the new end.
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x42 1M 2M' " + image);
  // Not cluster-aligned: the rest of the last cluster, still shared with the snapshot, is zeroed
  // in a copy.
  const uint64_t new_size = 1536 * 1024 + 512;
  {
    auto node = OpenImageOrFail(image, false);
    ASSERT_NE(node, nullptr);
    absl::Status status = node->Truncate(new_size);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(node->Truncate(4 * kMiB).ok());
    std::vector<unsigned char> data = testing::ReadAll(*node);
    ASSERT_EQ(data.size(), 4 * kMiB);
    EXPECT_EQ(std::count(data.begin(), data.begin() + kMiB, 0x41), long(kMiB));
    EXPECT_EQ(std::count(data.begin() + kMiB, data.begin() + new_size, 0x42),
              long(new_size - kMiB));
    EXPECT_EQ(std::count(data.begin() + new_size, data.end(), 0), long(4 * kMiB - new_size));
  }
  EXPECT_EQ(QemuVirtualSize(image), 4 * kMiB);
  ExpectClean(image);
  // RunCommand fails the test unless the command exits with 0.
  RunCommand("qemu-img snapshot -a first " + image + " 2>&1");
  EXPECT_EQ(QemuVirtualSize(image), 8 * kMiB);
  ExpectClean(image);
  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  ASSERT_EQ(contents.size(), 8 * kMiB);
  EXPECT_EQ(std::count(contents.begin(), contents.end(), 0x41), long(8 * kMiB));
}

// QEMU's rule: a version 2 snapshot does not record its disk size, so after a resize it could not
// be reverted to (qemu-img snapshot -a fails); neither growing nor shrinking is allowed.
TEST_F(Qcow2ResizeTest, Version2ImagesWithInternalSnapshotsAreNotResized) {
  std::string image = dir_.path() + "/image.qcow2";
  RunCommand("qemu-img create -f qcow2 -o compat=0.10 " + image + " 4M >/dev/null");
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x11 0 4M' " + image);
  RunCommand("qemu-img snapshot -c first " + image);
  {
    auto node = OpenImageOrFail(image, false);
    ASSERT_NE(node, nullptr);
    for (uint64_t size : {8 * kMiB, 2 * kMiB}) {
      absl::Status status = node->Truncate(size);
      EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
      EXPECT_NE(status.message().find("version 2"), std::string::npos) << status;
    }
    EXPECT_EQ(node->size(), 4 * kMiB);
  }
  EXPECT_EQ(QemuVirtualSize(image), 4 * kMiB);
  ExpectClean(image);
  // RunCommand fails the test unless the command exits with 0.
  RunCommand("qemu-img snapshot -a first " + image + " 2>&1");
}

TEST_F(Qcow2ResizeTest, ReadOnlyImagesCannotBeResized) {
  std::string image = dir_.path() + "/image.qcow2";
  RunCommand("qemu-img create -f qcow2 " + image + " 1M >/dev/null");
  auto node = OpenImageOrFail(image, true);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->Truncate(2 * kMiB).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace bexd::block
