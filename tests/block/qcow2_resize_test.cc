// SPDX-License-Identifier: GPL-2.0-or-later
// Resizing a qcow2 node: growing (with a larger L1 table when needed) and shrinking only what
// holds no data, checked with qemu-img.
#include <gtest/gtest.h>

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
using testing::ScratchDir;

constexpr uint64_t kMiB = 1 << 20;

uint64_t QemuVirtualSize(const std::string& image) {
  auto json = nlohmann::json::parse(RunCommand("qemu-img info -U --output=json " + image));
  return json["virtual-size"];
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

TEST_F(Qcow2ResizeTest, ShrinkingIsRefusedOverDataAndAllowedOverUnallocatedSpace) {
  std::string image = dir_.path() + "/image.qcow2";
  RunCommand("qemu-img create -f qcow2 " + image + " 8M >/dev/null");
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x41 1M 1M' " + image);
  {
    auto node = OpenImageOrFail(image, false);
    ASSERT_NE(node, nullptr);
    absl::Status status = node->Truncate(1536 * 1024);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("allocated"), std::string::npos) << status;
    EXPECT_EQ(node->size(), 8 * kMiB);
    ASSERT_TRUE(node->Truncate(2 * kMiB).ok());
    EXPECT_EQ(node->size(), 2 * kMiB);
    auto queue = MakeQueue(*node);
    std::vector<unsigned char> byte(1);
    EXPECT_EQ(testing::ReadAt(*queue, byte.data(), 1, 2 * kMiB), -EINVAL);
  }
  EXPECT_EQ(QemuVirtualSize(image), 2 * kMiB);
  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  EXPECT_EQ(contents[kMiB], 0x41);
  EXPECT_EQ(testing::QemuCheck(image).corruptions, 0u);
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
