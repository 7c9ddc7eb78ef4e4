// SPDX-License-Identifier: GPL-2.0-or-later
// FUSE exports of raw nodes: data written through the mount lands in the image at the node's
// offset and reads back; the window's end holds; a growable export grows the image; and one
// partition of a whole-disk image, exported by a bexd started with QSD's keyval syntax, gives
// the same bytes as the kernel's loop device with --offset/--sizelimit, both ways.
#include <fcntl.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "block/raw_node.h"
#include "tests/export/export_fixture.h"
#include "tests/support/loop_device.h"

namespace bexd::exports::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::shared_ptr<block::BlockNode> OpenRaw(std::shared_ptr<block::BlockNode> file,
                                          block::RawOptions options) {
  auto raw = block::RawNode::Open("raw0", options, false, std::move(file));
  EXPECT_TRUE(raw.ok()) << raw.status();
  return raw.ok() ? *raw : nullptr;
}

std::vector<uint8_t> Pattern(size_t length, uint64_t offset, uint32_t seed) {
  std::vector<uint8_t> bytes(length);
  FillPattern(bytes.data(), length, offset, seed);
  return bytes;
}

void WriteAt(const std::string& path, const std::vector<uint8_t>& data, uint64_t offset) {
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), offset), ssize_t(data.size()))
      << path << ": " << std::strerror(errno);
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
}

// The bytes of a file or block device read with O_DIRECT, past every page cache in front of it.
std::vector<uint8_t> ReadDirect(const std::string& path, uint64_t length) {
  AlignedBuffer buffer(length);
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  uint64_t done = 0;
  while (fd >= 0 && done < length) {
    ssize_t n = ::pread(fd, buffer.data + done, length - done, done);
    if (n <= 0) {
      ADD_FAILURE() << path << ": read at " << done << ": "
                    << (n < 0 ? std::strerror(errno) : "EOF");
      break;
    }
    done += n;
  }
  if (fd >= 0) ::close(fd);
  return std::vector<uint8_t>(buffer.data, buffer.data + done);
}

using RawExportTest = FuseExportTest;

TEST_F(RawExportTest, WritesLandAtTheOffsetAndReadBack) {
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "cache.direct=on" : "cache.direct=off");
    const std::string image = scratch_.CreateFile(direct ? "direct.img" : "cached.img", 8 * kMiB);
    std::vector<uint8_t> expected = Pattern(8 * kMiB, 0, 1);
    WriteAt(image, expected, 0);
    const std::string mountpoint = MakeMountpoint(direct ? "direct" : "cached");
    auto raw = OpenRaw(OpenFileNode(image, false, direct),
                       block::RawOptions{.offset = 2 * kMiB, .size = 4 * kMiB});
    ASSERT_NE(raw, nullptr);
    ASSERT_NE(Start(FuseOptions(mountpoint, true, 2), raw), nullptr);
    EXPECT_EQ(FileSize(mountpoint), 4 * kMiB);
    EXPECT_EQ(ReadWholeFile(mountpoint),
              std::vector<uint8_t>(expected.begin() + 2 * kMiB, expected.begin() + 6 * kMiB));

    // Aligned, unaligned and last-byte writes through the export.
    for (uint64_t offset : {uint64_t{0}, uint64_t{12345}, 4 * kMiB - 65536}) {
      std::vector<uint8_t> data = Pattern(65536, offset, 2);
      WriteAt(mountpoint, data, offset);
      std::copy(data.begin(), data.end(), expected.begin() + 2 * kMiB + offset);
    }
    EXPECT_EQ(ReadWholeFile(image), expected);
    EXPECT_EQ(ReadWholeFile(mountpoint),
              std::vector<uint8_t>(expected.begin() + 2 * kMiB, expected.begin() + 6 * kMiB));

    // The window's end is the export's: nothing past it reaches the image.
    int fd = ::open(mountpoint.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::pwrite(fd, "x", 1, 4 * kMiB), -1);
    EXPECT_EQ(errno, EIO);
    ::close(fd);
    EXPECT_EQ(ReadWholeFile(image), expected);
  }
}

TEST_F(RawExportTest, GrowableExportGrowsTheImageBehindTheOffset) {
  const std::string image = scratch_.CreateFile("image", 2 * kMiB);
  const std::string mountpoint = MakeMountpoint();
  auto raw = OpenRaw(OpenFileNode(image), block::RawOptions{.offset = kMiB});
  ASSERT_NE(raw, nullptr);
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 1, /*growable=*/true), raw), nullptr);
  std::vector<uint8_t> data = Pattern(4096, 0, 3);
  WriteAt(mountpoint, data, 3 * kMiB);
  EXPECT_EQ(FileSize(mountpoint), 3 * kMiB + 4096);
  EXPECT_EQ(FileSize(image), 4 * kMiB + 4096);
  std::vector<uint8_t> bytes = ReadWholeFile(image);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 4 * kMiB, bytes.end()), data);
}

TEST_F(RawExportTest, PartitionExportMatchesLosetup) {
  if (::geteuid() != 0) GTEST_SKIP() << "losetup needs root";
  int status = 0;
  if (RunCommand("sfdisk --version", &status), status != 0) GTEST_SKIP() << "sfdisk is missing";

  // A whole-disk image with two partitions, as sfdisk writes them.
  const std::string disk = scratch_.CreateFile("disk.img", 64 * kMiB);
  std::string output = RunCommand(
      "printf 'label: dos\\nstart=2048, size=40960, type=83\\n"
      "start=43008, size=32768, type=83\\n' | sfdisk --quiet " +
          disk,
      &status);
  ASSERT_EQ(status, 0) << output;
  output = RunCommand("sfdisk --json " + disk, &status);
  ASSERT_EQ(status, 0) << output;
  const nlohmann::json table = nlohmann::json::parse(output)["partitiontable"];
  ASSERT_EQ(table["partitions"].size(), 2u) << output;
  const uint64_t sector = table.value("sectorsize", 512);
  const uint64_t offset = table["partitions"][1]["start"].get<uint64_t>() * sector;
  const uint64_t size = table["partitions"][1]["size"].get<uint64_t>() * sector;
  ASSERT_EQ(offset, 21 * kMiB);
  ASSERT_EQ(size, 16 * kMiB);

  // Patterns in both partitions; the export shows only the second.
  const std::vector<uint8_t> first = Pattern(20 * kMiB, kMiB, 4);
  WriteAt(disk, first, kMiB);
  WriteAt(disk, Pattern(size, offset, 5), offset);

  bexd::testing::LoopDevice loop(disk, {.offset = offset, .size = size, .read_only = true});
  if (loop.path().empty()) GTEST_SKIP() << "no loop device (losetup failed)";

  const std::string mountpoint = MakeMountpoint("part2");
  Daemon daemon({"--blockdev",
                 "raw,node-name=part2,offset=" + std::to_string(offset) +
                     ",size=" + std::to_string(size) + ",file.driver=file,file.filename=" + disk,
                 "--export", "fuse,id=exp0,node-name=part2,writable=on,mountpoint=" + mountpoint});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));

  EXPECT_EQ(FileSize(mountpoint), size);
  uint64_t loop_size = 0;
  int loop_fd = ::open(loop.path().c_str(), O_RDONLY);
  ASSERT_GE(loop_fd, 0) << std::strerror(errno);
  ASSERT_EQ(::ioctl(loop_fd, BLKGETSIZE64, &loop_size), 0);
  ::close(loop_fd);
  EXPECT_EQ(loop_size, size);
  const std::vector<uint8_t> exported = ReadWholeFile(mountpoint);
  EXPECT_EQ(exported, Pattern(size, offset, 5));
  EXPECT_TRUE(exported == ReadDirect(loop.path(), size)) << "export and loop device differ";

  // Writes through the export show through the loop device at the same places.
  for (uint64_t at : {uint64_t{0}, uint64_t{777777}, size - 4096}) {
    WriteAt(mountpoint, Pattern(4096, at, 6), at);
  }
  const std::vector<uint8_t> after = ReadDirect(loop.path(), size);
  EXPECT_TRUE(after == ReadWholeFile(mountpoint)) << "export and loop device differ after writes";
  for (uint64_t at : {uint64_t{0}, uint64_t{777777}, size - 4096}) {
    EXPECT_EQ(std::vector<uint8_t>(after.begin() + at, after.begin() + at + 4096),
              Pattern(4096, at, 6))
        << "at " << at;
  }
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  // The first partition and the partition table were never touched.
  std::vector<uint8_t> whole = ReadWholeFile(disk);
  EXPECT_EQ(std::vector<uint8_t>(whole.begin() + kMiB, whole.begin() + 21 * kMiB), first);
  output = RunCommand("sfdisk --json " + disk, &status);
  EXPECT_EQ(nlohmann::json::parse(output)["partitiontable"], table);
}

}  // namespace
}  // namespace bexd::exports::testing
