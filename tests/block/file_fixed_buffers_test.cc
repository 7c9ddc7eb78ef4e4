// SPDX-License-Identifier: GPL-2.0-or-later
// aio=io_uring with registered buffers (IoQueue::UseBuffers): data in the named regions goes
// through the kernel's fixed buffers, registered as far as requests reach. Checked by the bytes
// that land in the file and in the buffers, and by the ring's own account of what it registered
// (/proc/self/fdinfo of the io_uring descriptor).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"
#include "tests/support/io_uring_fdinfo.h"

namespace bexd::block {
namespace {

using testing::Outcome;
using testing::Pattern;
using testing::Prepare;
using testing::ReadAt;
using testing::WaitIdle;
using testing::WriteAt;

constexpr size_t kRegionBytes = (size_t{1} << 20) + 4096;  // a /dev/fuse slot's shape
constexpr size_t kRegions = 8;

// Regions laid out as a transport's slots: one anonymous mapping, cut into equal parts.
class SlotMemory {
 public:
  explicit SlotMemory(void* at = nullptr) {
    void* base = mmap(at, kRegionBytes * kRegions, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (at ? MAP_FIXED : 0), -1, 0);
    EXPECT_NE(base, MAP_FAILED) << std::strerror(errno);
    base_ = static_cast<unsigned char*>(base);
    for (size_t i = 0; i < kRegions; ++i) regions_.push_back({Region(i), kRegionBytes});
  }
  ~SlotMemory() {
    if (base_ != nullptr) munmap(base_, kRegionBytes * kRegions);
  }
  // Unmaps the memory now; the destructor then leaves it alone.
  void Unmap() {
    munmap(base_, kRegionBytes * kRegions);
    base_ = nullptr;
  }
  unsigned char* base() const { return base_; }
  unsigned char* Region(size_t i) const { return base_ + i * kRegionBytes; }
  const std::vector<struct iovec>& regions() const { return regions_; }

 private:
  unsigned char* base_ = nullptr;
  std::vector<struct iovec> regions_;
};

// The registered buffers of the test's one io_uring (the queue's).
std::map<int, uint64_t> RegisteredLengths() {
  const auto rings = bexd::testing::IoUringRegisteredBuffers();
  EXPECT_EQ(rings.size(), 1u) << "io_uring descriptors in this process";
  return rings.empty() ? std::map<int, uint64_t>{} : rings.front();
}

class FileFixedBuffersTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/disk.img";
    ASSERT_EQ(
        testing::Shell("truncate -s " + std::to_string(kRegions * kRegionBytes) + " " + path_), 0);
    node_ = testing::OpenFileOrFail(path_, AioMode::kIoUring, GetParam());
    ASSERT_NE(node_, nullptr);
    queue_ = testing::MakeQueue(*node_);
    ASSERT_NE(queue_, nullptr);
  }

  testing::ScratchDir dir_;
  std::string path_;
  std::shared_ptr<BlockNode> node_;
  std::unique_ptr<IoQueue> queue_;
};

TEST_P(FileFixedBuffersTest, DataInRegionsReachesTheFileAndComesBack) {
  SlotMemory memory;
  queue_->UseBuffers(memory.regions());
  // Each region writes its own pattern from its data pages, at its own file offset; lengths
  // from one page to the region's whole data area.
  const size_t lengths[kRegions] = {4096, 8192, 65536, 131072, 1 << 20, 4096, 12288, 1 << 19};
  for (size_t i = 0; i < kRegions; ++i) {
    const auto data = Pattern(lengths[i], static_cast<uint32_t>(i + 1));
    std::memcpy(memory.Region(i) + 4096, data.data(), data.size());
    ASSERT_EQ(WriteAt(*queue_, memory.Region(i) + 4096, lengths[i], i << 20),
              static_cast<int64_t>(lengths[i]));
    EXPECT_EQ(testing::ReadFile(path_, i << 20, lengths[i]), data) << "region " << i;
  }
  // Read each back into another region, so a wrong buffer index shows as wrong bytes.
  for (size_t i = 0; i < kRegions; ++i) {
    const size_t into = (i + 3) % kRegions;
    std::memset(memory.Region(into), 0, kRegionBytes);
    ASSERT_EQ(ReadAt(*queue_, memory.Region(into) + 4096, lengths[i], i << 20),
              static_cast<int64_t>(lengths[i]));
    EXPECT_EQ(std::vector<unsigned char>(memory.Region(into) + 4096,
                                         memory.Region(into) + 4096 + lengths[i]),
              Pattern(lengths[i], static_cast<uint32_t>(i + 1)))
        << "file offset " << (i << 20) << " read into region " << into;
  }
}

TEST_P(FileFixedBuffersTest, ManyRequestsInFlightFromEveryRegion) {
  SlotMemory memory;
  queue_->UseBuffers(memory.regions());
  constexpr size_t kLength = 16384;
  IoRequest requests[kRegions];
  Outcome outcomes[kRegions];
  struct iovec iov[kRegions];
  for (size_t i = 0; i < kRegions; ++i) {
    const auto data = Pattern(kLength, static_cast<uint32_t>(100 + i));
    std::memcpy(memory.Region(i) + 4096, data.data(), kLength);
    iov[i] = {memory.Region(i) + 4096, kLength};
    Prepare(&requests[i], &outcomes[i], IoOp::kWrite, i * kLength, kLength, &iov[i], 1);
    queue_->Submit(&requests[i]);
  }
  queue_->Poll();
  ASSERT_TRUE(WaitIdle(*queue_));
  for (size_t i = 0; i < kRegions; ++i) {
    EXPECT_EQ(outcomes[i].result, static_cast<int64_t>(kLength));
    EXPECT_EQ(testing::ReadFile(path_, i * kLength, kLength),
              Pattern(kLength, static_cast<uint32_t>(100 + i)));
  }
}

TEST_P(FileFixedBuffersTest, RegistrationGrowsWithTheFarthestRequest) {
  SlotMemory memory;
  queue_->UseBuffers(memory.regions());
  auto lengths = RegisteredLengths();
  ASSERT_EQ(lengths.size(), kRegions);
  for (const auto& [index, length] : lengths) EXPECT_EQ(length, 0u) << "buffer " << index;

  // One page after the header page: two pages registered, no more.
  ASSERT_EQ(ReadAt(*queue_, memory.Region(3) + 4096, 4096, 0), 4096);
  lengths = RegisteredLengths();
  EXPECT_EQ(lengths[3], 8192u);
  EXPECT_EQ(lengths[2], 0u);
  // A request reaching 132 KiB into the region: the next power of two.
  ASSERT_EQ(ReadAt(*queue_, memory.Region(3) + 4096, 128 << 10, 0), 128 << 10);
  EXPECT_EQ(RegisteredLengths()[3], 256u << 10);
  // Reaching the end: the whole region, never past it.
  ASSERT_EQ(ReadAt(*queue_, memory.Region(3) + 4096, 1 << 20, 0), 1 << 20);
  EXPECT_EQ(RegisteredLengths()[3], kRegionBytes);

  queue_->UseBuffers({});
  EXPECT_TRUE(RegisteredLengths().empty());
}

TEST_P(FileFixedBuffersTest, ForgottenRegionsAreNotUsedForNewMemoryAtTheSameAddress) {
  SlotMemory old_memory;
  queue_->UseBuffers(old_memory.regions());
  const auto first = Pattern(65536, 7);
  testing::WriteFile(path_, first, 0);
  ASSERT_EQ(ReadAt(*queue_, old_memory.Region(0), 65536, 0), 65536);  // registers region 0
  void* address = old_memory.base();
  queue_->UseBuffers({});
  old_memory.Unmap();

  // New pages at the old address: a stale registration would still point at the old pages.
  SlotMemory new_memory(address);
  ASSERT_EQ(new_memory.base(), address);
  const auto second = Pattern(65536, 8);
  testing::WriteFile(path_, second, 0);
  ASSERT_EQ(ReadAt(*queue_, new_memory.Region(0), 65536, 0), 65536);
  EXPECT_EQ(std::vector<unsigned char>(new_memory.Region(0), new_memory.Region(0) + 65536), second);
}

TEST_P(FileFixedBuffersTest, DataOutsideRegionsAndSplitAcrossSegmentsStillWorks) {
  SlotMemory memory;
  queue_->UseBuffers(memory.regions());
  void* outside = nullptr;
  ASSERT_EQ(posix_memalign(&outside, 4096, 8192), 0);
  const auto data = Pattern(8192, 21);
  std::memcpy(outside, data.data(), data.size());
  ASSERT_EQ(WriteAt(*queue_, outside, 8192, 0), 8192);
  EXPECT_EQ(testing::ReadFile(path_, 0, 8192), data);
  free(outside);

  // Two segments, one in a region and one in the next: the plain vectored path.
  const auto split = Pattern(8192, 22);
  std::memcpy(memory.Region(1), split.data(), 4096);
  std::memcpy(memory.Region(2), split.data() + 4096, 4096);
  struct iovec iov[2] = {{memory.Region(1), 4096}, {memory.Region(2), 4096}};
  ASSERT_EQ(testing::RunOne(*queue_, IoOp::kWrite, 8192, 8192, iov, 2), 8192);
  EXPECT_EQ(testing::ReadFile(path_, 8192, 8192), split);
  // A segment that starts in a region but runs past its end is not a fixed buffer either.
  const auto across = Pattern(8192, 23);
  std::memcpy(memory.Region(4) + kRegionBytes - 4096, across.data(), 8192);
  ASSERT_EQ(WriteAt(*queue_, memory.Region(4) + kRegionBytes - 4096, 8192, 16384), 8192);
  EXPECT_EQ(testing::ReadFile(path_, 16384, 8192), across);
}

INSTANTIATE_TEST_SUITE_P(CacheModes, FileFixedBuffersTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Direct" : "Buffered";
                         });

}  // namespace
}  // namespace bexd::block
