// SPDX-License-Identifier: GPL-2.0-or-later
// SET_MEM_TABLE against a running device: a table the backend refuses changes nothing (the rings
// keep running on the old one), a block device must back its whole region, and guest memory on a
// block device that is large enough serves like a memfd.
#include <fcntl.h>
#include <linux/fuse.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "export/vhost_user/vhost_user_protocol.h"
#include "tests/support/loop_device.h"
#include "tests/support/scratch_dir.h"
#include "tests/vhost/export_fixture.h"

namespace bexd::test::vhost {
namespace {

namespace proto = exports::vhost;

class MemoryTableTest : public VhostExportTest {
 protected:
  void SetUp() override {
    VhostExportTest::SetUp();
    StartExport(1);
    FrontendOptions options = Options();
    options.timeout = std::chrono::milliseconds(5000);
    frontend_ = ConnectAndInit(options);
    ASSERT_NE(frontend_, nullptr);
    node_ = LookupImage(*frontend_);
    fh_ = OpenImage(*frontend_, node_);
  }

  // The table the frontend uses, plus `extra` as region 1 (guest and frontend addresses right
  // after the frontend's memory) backed by `extra_fd`; returns the backend's verdict (0: taken).
  uint64_t SendTableWith(uint64_t extra_size, int extra_fd) {
    proto::Memory table = {};
    table.nregions = 2;
    table.regions[0] = {0, frontend_->memory_bytes(), frontend_->frontend_addr(), 0};
    table.regions[1] = {frontend_->memory_bytes(), extra_size,
                        frontend_->frontend_addr() + frontend_->memory_bytes(), 0};
    absl::StatusOr<uint64_t> verdict = frontend_->Send(proto::kSetMemTable, &table, sizeof(table),
                                                       {frontend_->memory_fd(), extra_fd});
    EXPECT_TRUE(verdict.ok()) << verdict.status();
    return verdict.ok() ? *verdict : 0;
  }

  // Reads the image at `offset` through ring 1 and compares it with the backing file.
  void ExpectReadServed(uint64_t offset) {
    struct fuse_read_in in = {};
    in.fh = fh_;
    in.offset = offset;
    in.size = 4096;
    absl::StatusOr<FuseReply> reply =
        frontend_->Fuse(1, FUSE_READ, node_, &in, sizeof(in), nullptr, 0, 16 + 4096);
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->header.error, 0);
    EXPECT_EQ(reply->payload, ReadBacking(offset, 4096));
  }

  std::unique_ptr<Frontend> frontend_;
  uint64_t node_ = 0;
  uint64_t fh_ = 0;
};

TEST_F(MemoryTableTest, RefusedTableLeavesTheRingsOnTheOldOne) {
  ExpectReadServed(0);
  // A well-formed table that no longer holds the running rings: the rings could not restart.
  int fd = memfd_create("elsewhere", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(frontend_->memory_bytes())), 0);
  proto::Memory table = {};
  table.nregions = 1;
  table.regions[0] = {0, frontend_->memory_bytes(),
                      frontend_->frontend_addr() + 4 * frontend_->memory_bytes(), 0};
  absl::StatusOr<uint64_t> verdict =
      frontend_->Send(proto::kSetMemTable, &table, sizeof(table), {fd});
  close(fd);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_NE(*verdict, 0u);
  // The rings still run on the old table.
  ExpectReadServed(8192);
  ExpectReadServed(1 << 20);
  // And the old table can be replaced by a good one.
  ASSERT_TRUE(frontend_->SendMemTable().ok());
  ExpectReadServed(12288);
}

// A frontend that shrinks its memfd under the running rings: the backend's next access to the
// rings faults (SIGBUS), the ring breaks instead of the daemon dying, and the next frontend is
// served. The test's own frontend must not touch its memory after the shrink either.
TEST_F(MemoryTableTest, MemoryShrunkUnderTheRingsBreaksThemWithoutKillingTheDaemon) {
  ExpectReadServed(0);
  ASSERT_EQ(ftruncate(frontend_->memory_fd(), 0), 0) << std::strerror(errno);
  frontend_->Kick(1);
  EXPECT_TRUE(frontend_->WaitRingError(1)) << "ring 1 was not reported broken";
  frontend_.reset();
  std::unique_ptr<Frontend> next = ConnectAndInit(Options());
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(LookupImage(*next), node_);
}

TEST_F(MemoryTableTest, BlockDeviceMustBackItsWholeRegion) {
  testing::ScratchDir dir("vhost-memory");
  constexpr uint64_t kDeviceBytes = 64 << 10;
  testing::LoopDevice loop(dir.CreateFile("small", kDeviceBytes));
  if (loop.path().empty()) GTEST_SKIP() << "losetup is not available (needs root and loop)";
  int fd = open(loop.path().c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << strerror(errno);
  // Past the device's end an access would fault (SIGBUS) instead of reading memory.
  EXPECT_NE(SendTableWith(1 << 20, fd), 0u);
  ExpectReadServed(4096);
  EXPECT_EQ(SendTableWith(kDeviceBytes, fd), 0u);
  ExpectReadServed(8192);
  close(fd);
}

TEST_F(MemoryTableTest, FifoCannotBackARegion) {
  std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  int fd = open(fifo.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_NE(SendTableWith(1 << 20, fd), 0u);
  close(fd);
  fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_NE(SendTableWith(1 << 20, fd), 0u);
  close(fd);
  ExpectReadServed(4096);
}

using BlockDeviceMemoryTest = VhostExportTest;

TEST_F(BlockDeviceMemoryTest, ServesLikeAMemfd) {
  testing::ScratchDir dir("vhost-memory");
  testing::LoopDevice loop(dir.CreateFile("guest-ram", 32 << 20));
  if (loop.path().empty()) GTEST_SKIP() << "losetup is not available (needs root and loop)";
  StartExport(1);
  FrontendOptions options = Options();
  options.memory_path = loop.path();
  options.max_in_flight = 4;
  options.slot_buffer_bytes = 64 << 10;
  std::unique_ptr<Frontend> frontend = ConnectAndInit(options);
  ASSERT_NE(frontend, nullptr);
  ASSERT_LE(frontend->memory_bytes(), uint64_t{32} << 20);
  uint64_t node = LookupImage(*frontend);
  uint64_t fh = OpenImage(*frontend, node);
  std::vector<unsigned char> data(8192);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 3);
  struct fuse_write_in write_in = {};
  write_in.fh = fh;
  write_in.offset = 65536;
  write_in.size = static_cast<uint32_t>(data.size());
  absl::StatusOr<FuseReply> reply =
      frontend->Fuse(1, FUSE_WRITE, node, &write_in, sizeof(write_in), data.data(), data.size());
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->header.error, 0);
  EXPECT_EQ(ReadBacking(65536, data.size()), data);
  struct fuse_read_in read_in = {};
  read_in.fh = fh;
  read_in.offset = 65536;
  read_in.size = static_cast<uint32_t>(data.size());
  reply =
      frontend->Fuse(1, FUSE_READ, node, &read_in, sizeof(read_in), nullptr, 0, 16 + data.size());
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->header.error, 0);
  EXPECT_EQ(reply->payload, data);
}

}  // namespace
}  // namespace bexd::test::vhost
