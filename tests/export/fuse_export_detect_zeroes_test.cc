// SPDX-License-Identifier: GPL-2.0-or-later
// detect-zeroes through a real FUSE mount of a file node: zeroes written with pwrite read back as
// zeroes in every mode; off writes them as data, on zeroes the range in place (allocated, a hole
// to SEEK_DATA on ext4), unmap with discard=unmap frees it.
#include <fcntl.h>
#include <sys/stat.h>
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

struct Case {
  const char* name;
  block::DetectZeroes detect_zeroes;
  block::DiscardMode discard;
  bool stays_data;  // the zeroes are written as data
  bool freed;       // the range no longer holds storage
};

class FuseDetectZeroesTest : public FuseExportTest, public ::testing::WithParamInterface<Case> {};

TEST_P(FuseDetectZeroesTest, ZeroesWrittenThroughTheMount) {
  const Case& c = GetParam();
  const std::string image = scratch_.path() + "/image";
  std::vector<uint8_t> bytes = WritePatternFile(image, kImageSize, 5);
  block::BlockdevOptions options;
  options.node_name = "disk0";
  options.detect_zeroes = c.detect_zeroes;
  options.driver = block::FileOptions{.filename = image, .discard = c.discard};
  absl::StatusOr<std::shared_ptr<block::BlockNode>> node = block::OpenBlockNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, /*writable=*/true), *node), nullptr);

  struct stat st {};
  ASSERT_EQ(::stat(image.c_str(), &st), 0);
  const uint64_t allocated = static_cast<uint64_t>(st.st_blocks) * 512;
  const int fd = ::open(mountpoint.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const std::vector<uint8_t> zeroes(2 * kMiB, 0);
  EXPECT_EQ(::pwrite(fd, zeroes.data(), zeroes.size(), kMiB), static_cast<ssize_t>(zeroes.size()))
      << std::strerror(errno);
  std::vector<uint8_t> read(2 * kMiB, 0xff);
  EXPECT_EQ(::pread(fd, read.data(), read.size(), kMiB), static_cast<ssize_t>(read.size()));
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
  EXPECT_TRUE(read == zeroes) << "the mount shows other bytes";
  for (auto& running : exports_) running->Stop();

  std::fill(bytes.begin() + kMiB, bytes.begin() + 3 * kMiB, 0);
  EXPECT_TRUE(ReadWholeFile(image) == bytes) << "the image holds other bytes";
  ASSERT_EQ(::stat(image.c_str(), &st), 0);
  const uint64_t allocated_after = static_cast<uint64_t>(st.st_blocks) * 512;
  const int image_fd = ::open(image.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(image_fd, 0);
  // ext4 reports an unwritten extent as data while its pages sit in the page cache (the daemon
  // read the range back); dropping the clean pages lets SEEK_DATA see the extent itself.
  EXPECT_EQ(::posix_fadvise(image_fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  const off_t data = ::lseek(image_fd, static_cast<off_t>(kMiB), SEEK_DATA);
  ::close(image_fd);
  EXPECT_EQ(data == static_cast<off_t>(kMiB), c.stays_data) << "SEEK_DATA from 1 MiB: " << data;
  // Splitting the file's extent (a hole or an unwritten extent in the middle) may cost ext4 an
  // extent-tree block.
  constexpr uint64_t kExtentTreeSlack = 64 * 1024;
  if (c.freed) {
    EXPECT_LE(allocated_after, allocated - 2 * kMiB + kExtentTreeSlack);
  } else {
    EXPECT_GE(allocated_after, allocated);
    EXPECT_LE(allocated_after, allocated + kExtentTreeSlack);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, FuseDetectZeroesTest,
                         ::testing::Values(Case{"Off", block::DetectZeroes::kOff,
                                                block::DiscardMode::kUnmap, true, false},
                                           Case{"On", block::DetectZeroes::kOn,
                                                block::DiscardMode::kUnmap, false, false},
                                           Case{"Unmap", block::DetectZeroes::kUnmap,
                                                block::DiscardMode::kUnmap, false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace bexd::exports::testing
