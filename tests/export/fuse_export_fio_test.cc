// SPDX-License-Identifier: GPL-2.0-or-later
// fio with crc32c verification against a multi-queue export: four jobs, each in its own region.
#include <algorithm>
#include <string>
#include <vector>

#include "block/raw_node.h"

#include "tests/export/export_fixture.h"

namespace bexd::exports::testing {
namespace {

using FioTest = FuseExportTest;

constexpr uint64_t kJobBytes = kFioJobBytes;

TEST_F(FioTest, FourJobsVerifyCrc32cOnFourQueues) {
  const std::string image = scratch_.CreateFile("image", 4 * kJobBytes);
  const std::string mountpoint = MakeMountpoint();
  Export* running =
      Start(FuseOptions(mountpoint, true, 4), OpenFileNode(image, false, /*cache_direct=*/true));
  ASSERT_NE(running, nullptr);
  ExpectFioVerifies(running, mountpoint);
}

// The same through a raw node that starts 1 MiB into the image: every queue's requests go
// through the raw queue to its own file queue on the same thread.
TEST_F(FioTest, FourJobsVerifyCrc32cThroughRawOnFourQueues) {
  constexpr uint64_t kOffset = 1 << 20;
  const std::string image = scratch_.CreateFile("image", kOffset + 4 * kJobBytes + kOffset);
  const std::string mountpoint = MakeMountpoint();
  auto raw =
      block::RawNode::Open("raw0", block::RawOptions{.offset = kOffset, .size = 4 * kJobBytes},
                           false, OpenFileNode(image, false, /*cache_direct=*/true));
  ASSERT_TRUE(raw.ok()) << raw.status();
  Export* running = Start(FuseOptions(mountpoint, true, 4), *raw);
  ASSERT_NE(running, nullptr);
  ExpectFioVerifies(running, mountpoint);
  // Nothing landed outside the window.
  std::vector<uint8_t> bytes = ReadWholeFile(image);
  ASSERT_EQ(bytes.size(), 4 * kJobBytes + 2 * kOffset);
  EXPECT_EQ(std::count(bytes.begin(), bytes.begin() + kOffset, 0), long(kOffset));
  EXPECT_EQ(std::count(bytes.end() - kOffset, bytes.end(), 0), long(kOffset));
}

}  // namespace
}  // namespace bexd::exports::testing
