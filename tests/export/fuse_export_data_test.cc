// SPDX-License-Identifier: GPL-2.0-or-later
// Data written through the mount lands in the backing file, byte for byte; size changes and
// backing-file errors reach the client.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/export/export_fixture.h"
#include "tests/support/io_uring_fdinfo.h"

namespace bexd::exports::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// Writes [begin, end) of the file at `path` with pattern `seed` in chunks of varying `sizes`,
// then reads it back through a second descriptor and compares.
void WriteAndVerifyRegion(const std::string& path, bool direct, uint64_t begin, uint64_t end,
                          uint32_t seed, const std::vector<size_t>& sizes) {
  const int flags = O_RDWR | (direct ? O_DIRECT : 0);
  int fd = ::open(path.c_str(), flags);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  const size_t largest = *std::max_element(sizes.begin(), sizes.end());
  AlignedBuffer buffer(largest);
  AlignedBuffer check(largest);
  size_t turn = 0;
  for (uint64_t offset = begin; offset < end; ++turn) {
    const size_t length = std::min<uint64_t>(sizes[turn % sizes.size()], end - offset);
    FillPattern(buffer.data, length, offset, seed);
    ASSERT_EQ(::pwrite(fd, buffer.data, length, static_cast<off_t>(offset)),
              static_cast<ssize_t>(length))
        << "at " << offset << ": " << std::strerror(errno);
    offset += length;
  }
  turn = 0;
  for (uint64_t offset = begin; offset < end; ++turn) {
    const size_t length = std::min<uint64_t>(sizes[(turn + 1) % sizes.size()], end - offset);
    ASSERT_EQ(::pread(fd, check.data, length, static_cast<off_t>(offset)),
              static_cast<ssize_t>(length))
        << "at " << offset << ": " << std::strerror(errno);
    FillPattern(buffer.data, length, offset, seed);
    ASSERT_EQ(std::memcmp(check.data, buffer.data, length), 0) << "data differs at " << offset;
    offset += length;
  }
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
}

class DataTest : public FuseExportTest, public ::testing::WithParamInterface<bool> {};

// Two threads with O_DIRECT (aligned sizes) and two buffered (odd sizes and offsets), each in its
// own region; the backing file, read after Stop(), holds exactly what they wrote.
TEST_P(DataTest, WritesFromSeveralThreadsReachTheBackingFile) {
  const bool cache_direct = GetParam();
  constexpr uint64_t kRegion = 6 * kMiB;
  constexpr int kThreads = 4;
  const std::string image = scratch_.CreateFile("image", kRegion * kThreads);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 2), OpenFileNode(image, false, cache_direct)),
            nullptr);

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const bool direct = t < 2;
      const std::vector<size_t> sizes =
          direct ? std::vector<size_t>{4096, 65536, kMiB, 12288, 131072}
                 : std::vector<size_t>{1000, 4103, 65533, 333, 2 * kMiB + 17};
      WriteAndVerifyRegion(mountpoint, direct, t * kRegion, (t + 1) * kRegion, 100 + t, sizes);
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& running : exports_) running->Stop();

  const std::vector<uint8_t> backing = ReadWholeFile(image);
  ASSERT_EQ(backing.size(), kRegion * kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (uint64_t i = t * kRegion; i < (t + 1) * kRegion; ++i) {
      ASSERT_EQ(backing[i], PatternByte(i, 100 + t)) << "backing file differs at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CacheModes, DataTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Direct" : "Buffered"; });

// The registered bytes of every io_uring in this process (the file node's rings; the FUSE
// rings of the io_uring transport register none).
uint64_t RegisteredBufferBytes() {
  uint64_t total = 0;
  for (const auto& ring : bexd::testing::IoUringRegisteredBuffers()) {
    for (const auto& [index, length] : ring) total += length;
  }
  return total;
}

using IoUringNodeTest = FuseExportTest;

// aio=io_uring under a FUSE export: the transport hands its request buffers to the node's rings,
// which register them as requests reach into them; the data still lands byte for byte, and
// nothing stays registered once the export has stopped.
TEST_F(IoUringNodeTest, RequestBuffersAreRegisteredWithTheNodesRings) {
  constexpr uint64_t kRegion = 4 * kMiB;
  const std::string image = scratch_.CreateFile("image", 2 * kRegion);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 2),
                  OpenFileNode(image, false, /*cache_direct=*/true, block::AioMode::kIoUring)),
            nullptr);
  EXPECT_EQ(RegisteredBufferBytes(), 0u) << "registered before any request";

  WriteAndVerifyRegion(mountpoint, true, 0, kRegion, 41, {4096, 65536, kMiB, 12288});
  WriteAndVerifyRegion(mountpoint, false, kRegion, 2 * kRegion, 42, {1000, 65533, 2 * kMiB + 17});
  EXPECT_GT(RegisteredBufferBytes(), 0u) << "no request went through a registered buffer";

  for (auto& running : exports_) running->Stop();
  EXPECT_EQ(RegisteredBufferBytes(), 0u) << "still registered after stop";
  const std::vector<uint8_t> backing = ReadWholeFile(image);
  ASSERT_EQ(backing.size(), 2 * kRegion);
  for (uint64_t i = 0; i < 2 * kRegion; ++i) {
    ASSERT_EQ(backing[i], PatternByte(i, i < kRegion ? 41 : 42)) << "backing file differs at " << i;
  }
}

using SizeTest = FuseExportTest;

TEST_F(SizeTest, GrowableExportGrowsOnWritePastTheEnd) {
  const std::string image = scratch_.CreateFile("image", kMiB);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 1, /*growable=*/true), OpenFileNode(image)),
            nullptr);
  int fd = ::open(mountpoint.c_str(), O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  AlignedBuffer buffer(4096);
  FillPattern(buffer.data, 4096, 2 * kMiB, 7);
  ASSERT_EQ(::pwrite(fd, buffer.data, 4096, 2 * kMiB), 4096) << std::strerror(errno);
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 2 * kMiB + 4096);
  ::close(fd);
  for (auto& running : exports_) running->Stop();

  const std::vector<uint8_t> backing = ReadWholeFile(image);
  ASSERT_EQ(backing.size(), 2 * kMiB + 4096);
  EXPECT_TRUE(std::all_of(backing.begin(), backing.begin() + 2 * kMiB,
                          [](uint8_t byte) { return byte == 0; }));
  for (uint64_t i = 0; i < 4096; ++i) {
    ASSERT_EQ(backing[2 * kMiB + i], PatternByte(2 * kMiB + i, 7)) << "at " << i;
  }
}

TEST_F(SizeTest, FixedSizeExportRefusesWritesPastTheEnd) {
  const std::string image = scratch_.CreateFile("image", kMiB);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 1), OpenFileNode(image)), nullptr);
  int fd = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  char data[512] = {1};
  EXPECT_LT(::pwrite(fd, data, sizeof(data), 2 * kMiB), 0);
  EXPECT_EQ(errno, EIO);  // as QSD's
  ::close(fd);
  EXPECT_EQ(FileSize(mountpoint), kMiB);
}

TEST_F(SizeTest, TruncateThroughTheMountResizesTheBackingFile) {
  const std::string image = scratch_.CreateFile("image", kMiB);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 2), OpenFileNode(image)), nullptr);
  int fd = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::ftruncate(fd, 3 * kMiB), 0) << std::strerror(errno);
  EXPECT_EQ(FileSize(mountpoint), 3 * kMiB);
  EXPECT_EQ(FileSize(image), 3 * kMiB);
  ASSERT_EQ(::ftruncate(fd, kMiB / 2), 0) << std::strerror(errno);
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kMiB / 2);
  ::close(fd);
  for (auto& running : exports_) running->Stop();
  EXPECT_EQ(FileSize(image), kMiB / 2);
}

}  // namespace
}  // namespace bexd::exports::testing
