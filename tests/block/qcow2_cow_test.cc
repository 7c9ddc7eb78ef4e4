// SPDX-License-Identifier: GPL-2.0-or-later
// Copy-on-write: writes into compressed clusters and into clusters and L2 tables shared with
// internal snapshots allocate new ones and leave the old data to whoever still refers to it.
#include <gtest/gtest.h>

#include <random>
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

class Qcow2CowTest : public ::testing::Test {
 protected:
  // A 4 MiB image full of data, converted with `options`.
  std::string Convert(const std::string& options) {
    std::string source = dir_.CreateFile("source.raw", 4 * kMiB);
    testing::WriteFile(source, testing::Pattern(4 * kMiB, 5), 0);
    std::string image = dir_.path() + "/image.qcow2";
    RunCommand("qemu-img convert -f raw -O qcow2 " + options + " " + source + " " + image);
    return image;
  }

  void RandomWrites(const testing::ImageWithReference& image, int count, uint64_t max_length) {
    auto node = OpenImageOrFail(image.image, false);
    ASSERT_NE(node, nullptr);
    auto queue = MakeQueue(*node);
    std::mt19937_64 random(count);
    for (int i = 0; i < count; ++i) {
      uint64_t length = 1 + random() % max_length;
      uint64_t offset = random() % (4 * kMiB - length);
      image.Write(*queue, testing::Pattern(length, 500 + i), offset);
    }
  }

  ScratchDir dir_{"qcow2"};
};

TEST_F(Qcow2CowTest, WritesIntoCompressedClustersAllocateAndKeepTheRestOfTheCluster) {
  for (const char* type : {"zlib", "zstd"}) {
    std::string image = Convert(std::string("-c -o compression_type=") + type);
    testing::ImageWithReference pair = testing::WithReference(image, dir_);
    RandomWrites(pair, 60, 20000);
    pair.Verify();
  }
}

TEST_F(Qcow2CowTest, WritesLeaveInternalSnapshotsUntouched) {
  std::string image = Convert("-o cluster_size=4096");
  RunCommand("qemu-img snapshot -c before " + image);
  std::vector<unsigned char> before = testing::QemuContents(image, dir_);
  testing::ImageWithReference pair = testing::WithReference(image, dir_);
  // Shared clusters and shared L2 tables (the snapshot holds references to both).
  RandomWrites(pair, 80, 10000);
  pair.Verify();
  RunCommand("qemu-img snapshot -a before " + image);
  EXPECT_EQ(testing::FirstDifference(testing::QemuContents(image, dir_), before), -1);
  EXPECT_EQ(testing::QemuCheck(image).corruptions, 0u);
}

}  // namespace
}  // namespace bexd::block
