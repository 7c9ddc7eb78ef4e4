// SPDX-License-Identifier: GPL-2.0-or-later
// GuestMemory::Map on every kind of fd a frontend can pass: only what has a size (a regular file,
// a memfd, a block device) is mapped, and only when it backs the whole region; a page that loses
// its backing later faults without killing the process.
#include "export/vhost_user/guest_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/loop_device.h"
#include "tests/support/scratch_dir.h"

namespace bexd::exports {
namespace {

constexpr uint64_t kFrontendBase = 0x7f0000000000;

std::vector<GuestMemoryRegionSpec> OneRegion(uint64_t size, uint64_t offset = 0) {
  return {{0, size, kFrontendBase, offset}};
}

// Map()'s error for one region of `size` at `offset` of `fd`, or "" if it was mapped.
std::string MapError(int fd, uint64_t size, uint64_t offset = 0) {
  absl::StatusOr<std::unique_ptr<GuestMemory>> memory =
      GuestMemory::Map(OneRegion(size, offset), {fd});
  return memory.ok() ? "" : std::string(memory.status().message());
}

TEST(GuestMemoryTest, MemfdMustBackOffsetPlusSize) {
  int fd = memfd_create("guest", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  EXPECT_EQ(MapError(fd, 1 << 20), "");
  EXPECT_EQ(MapError(fd, 512 << 10, 512 << 10), "");
  EXPECT_NE(MapError(fd, 1 << 20, 4096).find("backs 0x100000 bytes, the region needs 0x101000"),
            std::string::npos)
      << MapError(fd, 1 << 20, 4096);
  close(fd);
}

TEST(GuestMemoryTest, OffsetPlusSizeOverflowIsRefused) {
  int fd = memfd_create("guest", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  EXPECT_NE(MapError(fd, 8192, ~uint64_t{0} - 4095).find("overflows"), std::string::npos);
  close(fd);
}

TEST(GuestMemoryTest, BlockDeviceSmallerThanTheRegionIsRefused) {
  testing::ScratchDir dir("guest-memory");
  constexpr uint64_t kDeviceBytes = 64 << 10;
  testing::LoopDevice loop(dir.CreateFile("backing", kDeviceBytes));
  if (loop.path().empty()) GTEST_SKIP() << "losetup is not available (needs root and loop)";
  int fd = open(loop.path().c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << strerror(errno);
  std::string error = MapError(fd, 1 << 20);
  EXPECT_NE(error.find("backs 0x10000 bytes, the region needs 0x100000"), std::string::npos)
      << error;
  error = MapError(fd, kDeviceBytes, 4096);
  EXPECT_NE(error.find("backs 0x10000 bytes, the region needs 0x11000"), std::string::npos)
      << error;

  // What the device does back is mapped, and the mapping is the device.
  absl::StatusOr<std::unique_ptr<GuestMemory>> memory =
      GuestMemory::Map(OneRegion(kDeviceBytes - 4096, 4096), {fd});
  ASSERT_TRUE(memory.ok()) << memory.status();
  void* host = (*memory)->GuestToHost(kDeviceBytes - 8192, 4096);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ((*memory)->GuestToHost(kDeviceBytes - 4096, 1), nullptr);
  memset(host, 0x5c, 4096);
  std::vector<unsigned char> back(4096);
  ASSERT_EQ(pread(fd, back.data(), back.size(), kDeviceBytes - 4096), 4096);
  EXPECT_EQ(back, std::vector<unsigned char>(4096, 0x5c));
  close(fd);
}

TEST(GuestMemoryTest, FdsWithoutASizeAreRefused) {
  testing::ScratchDir dir("guest-memory");
  std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  int fifo_fd = open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // O_RDWR: no writer to wait for
  ASSERT_GE(fifo_fd, 0);
  int zero_fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
  ASSERT_GE(zero_fd, 0);
  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets), 0);
  struct Case {
    int fd;
    const char* kind;
  } cases[] = {{fifo_fd, "a pipe"}, {zero_fd, "a character device"}, {sockets[0], "a socket"}};
  for (const Case& c : cases) {
    std::string error = MapError(c.fd, 1 << 20);
    EXPECT_NE(error.find(std::string("memory region 0: the fd is ") + c.kind +
                         ", not a regular file, memfd or block device"),
              std::string::npos)
        << error;
  }
  for (int fd : {fifo_fd, zero_fd, sockets[0], sockets[1]}) close(fd);
}

// Lines of /proc/self/maps that name `name`.
int MappingsOf(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) count += line.find(name) != std::string::npos;
  return count;
}

TEST(GuestMemoryTest, SecondRegionIsCheckedAndNothingStaysMapped) {
  int fd = memfd_create("guest-refused-table", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  int zero_fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
  ASSERT_GE(zero_fd, 0);
  std::vector<GuestMemoryRegionSpec> regions = {{0, 1 << 20, kFrontendBase, 0},
                                                {1 << 20, 1 << 20, kFrontendBase + (1 << 20), 0}};
  absl::StatusOr<std::unique_ptr<GuestMemory>> memory = GuestMemory::Map(regions, {fd, zero_fd});
  ASSERT_FALSE(memory.ok());
  EXPECT_NE(memory.status().message().find("memory region 1"), std::string::npos)
      << memory.status();
  EXPECT_EQ(MappingsOf("guest-refused-table"), 0);  // region 0 was mapped, then let go
  close(zero_fd);
  close(fd);
}

// A frontend that shrinks its file after the table was checked: an access to the lost pages
// raises SIGBUS, which is survived (zeroes are read) and reported through faulted().
TEST(GuestMemoryTest, APageLostAfterMappingFaultsWithoutKillingTheProcess) {
  int fd = memfd_create("guest-shrunk", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  absl::StatusOr<std::unique_ptr<GuestMemory>> memory = GuestMemory::Map(OneRegion(1 << 20), {fd});
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto* bytes = static_cast<volatile unsigned char*>((*memory)->GuestToHost(0, 1 << 20));
  ASSERT_NE(bytes, nullptr);
  bytes[4096] = 7;
  EXPECT_FALSE((*memory)->faulted());
  ASSERT_EQ(ftruncate(fd, 0), 0);
  EXPECT_EQ(bytes[8192], 0);  // faults: the page has no backing any more
  EXPECT_TRUE((*memory)->faulted());
  bytes[8192] = 9;  // the replacement page takes writes too
  EXPECT_EQ(bytes[8192], 9);
  memory->reset();
  close(fd);
}

// hugetlbfs memory the machine has no huge pages for is refused when the table arrives, rather
// than faulting at the first access.
TEST(GuestMemoryTest, HugetlbMemoryWithoutHugePagesIsRefused) {
  uint64_t free_pages = 0, page_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    if (key == "HugePages_Free:") meminfo >> free_pages;
    if (key == "Hugepagesize:") meminfo >> page_kib;
  }
  if (page_kib == 0) GTEST_SKIP() << "no huge page support";
  int fd = memfd_create("guest-huge", MFD_CLOEXEC | MFD_HUGETLB);
  if (fd < 0) GTEST_SKIP() << "memfd_create(MFD_HUGETLB): " << std::strerror(errno);
  const uint64_t bytes = (free_pages + 1) * page_kib * 1024;
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0) << std::strerror(errno);
  EXPECT_NE(MapError(fd, bytes).find("mmap of"), std::string::npos) << MapError(fd, bytes);
  close(fd);
}

}  // namespace
}  // namespace bexd::exports
