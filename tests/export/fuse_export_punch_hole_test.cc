// SPDX-License-Identifier: GPL-2.0-or-later
// fallocate(PUNCH_HOLE) through a real mount of a file node: with discard=unmap the range is
// freed, with discard=ignore (which frees nothing) it is written as zeroes and stays allocated.
// Either way it succeeds and reads back as zeroes, through the mount and in the image.
#include <fcntl.h>
#include <linux/falloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "block/open.h"
#include "tests/export/export_fixture.h"

namespace bexd::exports::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kImageSize = 8 * kMiB;

class PunchHoleTest : public FuseExportTest,
                      public ::testing::WithParamInterface<block::DiscardMode> {};

TEST_P(PunchHoleTest, PunchedRangeReadsAsZeroesAndIsFreedOnlyWithUnmap) {
  const bool unmap = GetParam() == block::DiscardMode::kUnmap;
  const std::string image = scratch_.path() + "/image";
  std::vector<uint8_t> bytes = WritePatternFile(image, kImageSize, 3);
  block::BlockdevOptions options;
  options.node_name = "disk0";
  options.driver = block::FileOptions{.filename = image, .discard = GetParam()};
  absl::StatusOr<std::shared_ptr<block::BlockNode>> node = block::OpenBlockNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, /*writable=*/true), *node), nullptr);

  const uint64_t allocated = AllocatedBytes(image);
  const int fd = ::open(mountpoint.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kMiB, 2 * kMiB), 0)
      << std::strerror(errno);
  std::vector<uint8_t> read(2 * kMiB, 0xff);
  EXPECT_EQ(::pread(fd, read.data(), read.size(), kMiB), static_cast<ssize_t>(read.size()));
  ::close(fd);
  EXPECT_TRUE(read == std::vector<uint8_t>(2 * kMiB, 0)) << "the mount shows other bytes";
  EXPECT_EQ(FileSize(mountpoint), kImageSize);
  EXPECT_EQ(AllocatedBytes(mountpoint), AllocatedBytes(image)) << "du differs through the mount";
  for (auto& running : exports_) running->Stop();

  std::fill(bytes.begin() + kMiB, bytes.begin() + 3 * kMiB, 0);
  EXPECT_TRUE(ReadWholeFile(image) == bytes) << "the image holds other bytes";
  if (unmap) {
    EXPECT_LE(AllocatedBytes(image), allocated - 2 * kMiB);
  } else {
    EXPECT_EQ(AllocatedBytes(image), allocated);
  }
}

INSTANTIATE_TEST_SUITE_P(Discard, PunchHoleTest,
                         ::testing::Values(block::DiscardMode::kIgnore, block::DiscardMode::kUnmap),
                         [](const auto& info) {
                           return info.param == block::DiscardMode::kUnmap ? "Unmap" : "Ignore";
                         });

}  // namespace
}  // namespace bexd::exports::testing
