// SPDX-License-Identifier: GPL-2.0-or-later
// detect-zeroes (block/block_node.cc): the zero check itself, and what each mode makes of a write
// of zeroes on real file nodes, directly and through a raw node. On ext4 (the scratch directory's
// file system here) a range zeroed with FALLOC_FL_ZERO_RANGE stays allocated but reads as a hole
// to SEEK_DATA (unwritten extents), a punched range is freed, and written zeroes are data.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "block/iov_util.h"
#include "block/open.h"
#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kImageSize = 4 * kMiB;
// Splitting the file's extent (a hole or an unwritten extent in the middle) may cost ext4 an
// extent-tree block.
constexpr uint64_t kExtentTreeSlack = 64 * 1024;

TEST(BufferIsZeroTest, FindsEveryNonZeroByteAtEveryLengthAndAlignment) {
  std::vector<unsigned char> buffer(300 + 8, 0);
  for (size_t start : {0, 1, 3, 7}) {
    for (size_t length = 0; length <= 300; ++length) {
      unsigned char* data = buffer.data() + start;
      ASSERT_TRUE(BufferIsZero(data, length)) << "start " << start << " length " << length;
      for (size_t at = 0; at < length; ++at) {
        data[at] = 0x80;
        ASSERT_FALSE(BufferIsZero(data, length))
            << "start " << start << " length " << length << " byte " << at;
        data[at] = 0;
      }
    }
  }
}

TEST(BufferIsZeroTest, IovecMustAddUpToTheLength) {
  std::vector<unsigned char> zeroes(4096, 0);
  std::vector<unsigned char> one(4096, 0);
  one[4095] = 1;
  struct iovec two[2] = {{zeroes.data(), 100}, {zeroes.data() + 100, 3996}};
  EXPECT_TRUE(IovIsZero(two, 2, 4096));
  EXPECT_FALSE(IovIsZero(two, 2, 4095));  // more data than the request says
  EXPECT_FALSE(IovIsZero(two, 2, 4097));  // less
  EXPECT_FALSE(IovIsZero(two, 0, 0));
  EXPECT_FALSE(IovIsZero(nullptr, 1, 4096));
  struct iovec last_non_zero[2] = {{zeroes.data(), 4096}, {one.data(), 4096}};
  EXPECT_FALSE(IovIsZero(last_non_zero, 2, 8192));
}

struct Allocation {
  uint64_t allocated_bytes = 0;
  bool data_at_range = false;  // SEEK_DATA from the range's start lands in it
};

Allocation AllocationOf(const std::string& path, uint64_t offset, uint64_t length) {
  Allocation allocation;
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << std::strerror(errno);
  allocation.allocated_bytes = static_cast<uint64_t>(st.st_blocks) * 512;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  // ext4 reports an unwritten extent as data while its pages sit in the page cache (as after a
  // read of the zeroed range); dropping the clean pages lets SEEK_DATA see the extent itself.
  EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  const off_t data = ::lseek(fd, static_cast<off_t>(offset), SEEK_DATA);
  allocation.data_at_range = data >= 0 && static_cast<uint64_t>(data) < offset + length;
  ::close(fd);
  return allocation;
}

// What a 1 MiB write of zeroes over written data left in the image.
enum class Expect {
  kData,           // written as data
  kZeroAllocated,  // zeroed, still allocated (write-zeroes without unmap)
  kFreed,          // zeroed and freed (write-zeroes with unmap, punched)
};

struct Case {
  const char* name;
  DetectZeroes detect_zeroes;
  DiscardMode discard;
  uint32_t write_flags;
  Expect expect;
};

class DetectZeroesFileTest : public ::testing::TestWithParam<Case> {
 protected:
  std::string MakeImage() {
    const std::string image = scratch_.CreateFile("image", kImageSize);
    pattern_ = Pattern(kImageSize, 7);
    WriteFile(image, pattern_, 0);
    EXPECT_EQ(Shell("sync '" + image + "'"), 0);
    return image;
  }

  ScratchDir scratch_{"detect-zeroes"};
  std::vector<unsigned char> pattern_;
};

void ExpectZeroedAs(const std::string& image, const Allocation& before, Expect expect) {
  const std::vector<unsigned char> zeroes(kMiB, 0);
  EXPECT_TRUE(ReadFile(image, kMiB, kMiB) == zeroes) << "the image holds other bytes";
  const Allocation after = AllocationOf(image, kMiB, kMiB);
  switch (expect) {
    case Expect::kData:
      EXPECT_TRUE(after.data_at_range);
      EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
      break;
    case Expect::kZeroAllocated:
      EXPECT_FALSE(after.data_at_range);
      EXPECT_GE(after.allocated_bytes, before.allocated_bytes);
      EXPECT_LE(after.allocated_bytes, before.allocated_bytes + kExtentTreeSlack);
      break;
    case Expect::kFreed:
      EXPECT_FALSE(after.data_at_range);
      EXPECT_LE(after.allocated_bytes, before.allocated_bytes - kMiB + kExtentTreeSlack);
      break;
  }
}

TEST_P(DetectZeroesFileTest, WriteOfZeroes) {
  const Case& c = GetParam();
  const std::string image = MakeImage();
  BlockdevOptions options;
  options.node_name = "disk0";
  options.detect_zeroes = c.detect_zeroes;
  options.driver = FileOptions{.filename = image, .discard = c.discard};
  absl::StatusOr<std::shared_ptr<BlockNode>> node = OpenBlockNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)->detect_zeroes(), c.detect_zeroes);
  std::unique_ptr<IoQueue> queue = MakeQueue(**node);
  ASSERT_NE(queue, nullptr);
  const Allocation before = AllocationOf(image, kMiB, kMiB);
  ASSERT_TRUE(before.data_at_range);

  const std::vector<unsigned char> zeroes(kMiB, 0);
  EXPECT_EQ(WriteAt(*queue, zeroes.data(), kMiB, kMiB, c.write_flags), int64_t(kMiB));
  // A write with one byte that is not zero is written as it is, whatever the mode.
  std::vector<unsigned char> almost(4096, 0);
  almost[4095] = 0xaa;
  EXPECT_EQ(WriteAt(*queue, almost.data(), almost.size(), 3 * kMiB), 4096);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  queue.reset();

  ExpectZeroedAs(image, before, c.expect);
  EXPECT_TRUE(ReadFile(image, 3 * kMiB, 4096) == almost);
  EXPECT_TRUE(ReadFile(image, 0, kMiB) ==
              std::vector<unsigned char>(pattern_.begin(), pattern_.begin() + kMiB));
  EXPECT_TRUE(AllocationOf(image, 3 * kMiB, 4096).data_at_range);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, DetectZeroesFileTest,
    ::testing::Values(
        Case{"OffWritesData", DetectZeroes::kOff, DiscardMode::kUnmap, 0, Expect::kData},
        Case{"OnZeroesInPlace", DetectZeroes::kOn, DiscardMode::kIgnore, 0, Expect::kZeroAllocated},
        Case{"OnNeverUnmaps", DetectZeroes::kOn, DiscardMode::kUnmap, 0, Expect::kZeroAllocated},
        Case{"UnmapFrees", DetectZeroes::kUnmap, DiscardMode::kUnmap, 0, Expect::kFreed},
        // The schema refuses this pair as QEMU does; a node given it anyway acts as `on`.
        Case{"UnmapWithoutDiscardActsAsOn", DetectZeroes::kUnmap, DiscardMode::kIgnore, 0,
             Expect::kZeroAllocated},
        // A FUA write must be durable on completion, which write-zeroes does not promise.
        Case{"FuaWriteStaysAWrite", DetectZeroes::kUnmap, DiscardMode::kUnmap, kIoFua,
             Expect::kData}),
    [](const auto& info) { return std::string(info.param.name); });

// detect-zeroes belongs to the node it is set on: a raw node with it turns the write into
// write-zeroes that its file child (without it) carries out.
TEST_F(DetectZeroesFileTest, OnARawNodeOverAFileNode) {
  const std::string image = MakeImage();
  BlockdevOptions file_options;
  file_options.node_name = "file0";
  file_options.driver = FileOptions{.filename = image, .discard = DiscardMode::kUnmap};
  absl::StatusOr<std::shared_ptr<BlockNode>> file = OpenBlockNode(file_options);
  ASSERT_TRUE(file.ok()) << file.status();
  BlockdevOptions raw_options;
  raw_options.node_name = "raw0";
  raw_options.detect_zeroes = DetectZeroes::kUnmap;
  raw_options.driver = RawOptions{.discard = DiscardMode::kUnmap};
  absl::StatusOr<std::shared_ptr<BlockNode>> raw =
      OpenBlockNode(raw_options, NodeChildren{.file = *file});
  ASSERT_TRUE(raw.ok()) << raw.status();
  std::unique_ptr<IoQueue> queue = MakeQueue(**raw);
  ASSERT_NE(queue, nullptr);
  const Allocation before = AllocationOf(image, kMiB, kMiB);
  const std::vector<unsigned char> zeroes(kMiB, 0);
  EXPECT_EQ(WriteAt(*queue, zeroes.data(), kMiB, kMiB), int64_t(kMiB));
  queue.reset();
  ExpectZeroedAs(image, before, Expect::kFreed);
}

// null-co stores nothing; a detected write-zeroes completes like the write would have.
TEST(DetectZeroesNullTest, CompletesTheWrite) {
  BlockdevOptions options;
  options.node_name = "null0";
  options.detect_zeroes = DetectZeroes::kOn;
  options.driver = NullOptions{.size = kMiB};
  absl::StatusOr<std::shared_ptr<BlockNode>> node = OpenBlockNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  std::unique_ptr<IoQueue> queue = MakeQueue(**node);
  ASSERT_NE(queue, nullptr);
  const std::vector<unsigned char> zeroes(65536, 0);
  EXPECT_EQ(WriteAt(*queue, zeroes.data(), zeroes.size(), 0), 65536);
}

}  // namespace
}  // namespace bexd::block::testing
