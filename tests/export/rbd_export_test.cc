// SPDX-License-Identifier: GPL-2.0-or-later
// FUSE exports of RBD images on a real single-node Ceph cluster (tests/support/ceph-cluster.sh):
// data patterns and fio on four queues compared with `rbd export`; a growable export resizing
// the image; a second bexd refused while the first writes, a reader next to it; a snapshot
// exported read-only next to the writer by a read-only cephx user whose key comes from a secret
// file; and the OSD killed and restarted under load.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "block/open.h"
#include "tests/cli/bexd_process.h"
#include "tests/export/export_fixture.h"
#include "tests/support/ceph_cluster.h"

namespace bexd::exports::testing {
namespace {

using bexd::testing::CephCluster;
using bexd::testing::RunBexd;

constexpr uint64_t kMiB = 1 << 20;

std::vector<uint8_t> Pattern(size_t length, uint64_t offset, uint32_t seed) {
  std::vector<uint8_t> bytes(length);
  FillPattern(bytes.data(), length, offset, seed);
  return bytes;
}

std::string Text(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

// pwrite and fsync through a path; 0 or the errno of the step that failed.
int WriteAndSync(const std::string& path, const std::vector<uint8_t>& data, uint64_t offset) {
  int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) return errno;
  int error = 0;
  if (::pwrite(fd, data.data(), data.size(), offset) != ssize_t(data.size())) error = errno;
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  ::close(fd);
  return error;
}

class RbdExportTest : public FuseExportTest {
 protected:
  void SetUp() override {
    std::string reason = CephCluster::SkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    cluster_ = std::make_unique<CephCluster>(store());
    ASSERT_TRUE(cluster_->ok()) << cluster_->error();
  }
  virtual CephCluster::Store store() const { return CephCluster::Store::kMemstore; }

  std::shared_ptr<block::BlockNode> OpenRbd(const std::string& image, bool read_only = false) {
    block::RbdOptions rbd;
    rbd.pool = "rbd";
    rbd.image = image;
    rbd.conf = cluster_->conf();
    block::BlockdevOptions options;
    options.node_name = "rbd0";
    options.read_only = read_only;
    options.driver = rbd;
    absl::StatusOr<std::shared_ptr<block::BlockNode>> node = block::OpenBlockNode(options);
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? *node : nullptr;
  }

  // --blockdev for a bexd process, in QSD's keyval syntax.
  std::string Blockdev(const std::string& image, const std::string& extra = "") const {
    return "driver=rbd,node-name=rbd0,pool=rbd,image=" + image + ",conf=" + cluster_->conf() +
           extra;
  }
  static std::string FuseExport(const std::string& mountpoint, bool writable, uint32_t queues = 2) {
    return "type=fuse,id=e0,node-name=rbd0,mountpoint=" + mountpoint +
           ",writable=" + (writable ? "on" : "off") + ",num-queues=" + std::to_string(queues);
  }

  std::unique_ptr<CephCluster> cluster_;
};

TEST_F(RbdExportTest, FourQueuesOfPatternsAndFioMatchRbdExport) {
  constexpr uint64_t kJobBytes = 8 * kMiB;  // two 4 MiB objects per job
  ASSERT_TRUE(cluster_->CreateImage("img", 4 * kJobBytes));
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(FuseOptions(mountpoint, true, 4), OpenRbd("img"));
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(FileSize(mountpoint), 4 * kJobBytes);

  // Aligned, unaligned, object-crossing (4 MiB objects) and last-byte writes.
  std::vector<uint8_t> expected(4 * kJobBytes, 0);
  const std::pair<uint64_t, uint64_t> writes[] = {
      {0, kMiB}, {12345, 65536}, {4 * kMiB - 70000, 65536}, {4 * kJobBytes - 8192, 8192}};
  for (const auto& [offset, length] : writes) {
    std::vector<uint8_t> data = Pattern(length, offset, 1);
    ASSERT_EQ(WriteAndSync(mountpoint, data, offset), 0);
    std::copy(data.begin(), data.end(), expected.begin() + offset);
  }
  EXPECT_TRUE(ReadWholeFile(mountpoint) == expected);
  EXPECT_TRUE(cluster_->ExportImage("rbd/img") == Text(expected));

  ExpectFioVerifies(running, mountpoint, kJobBytes);
  int fd = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
  // What fio left is what the cluster holds.
  std::vector<uint8_t> through_export = ReadWholeFile(mountpoint);
  EXPECT_EQ(through_export.size(), 4 * kJobBytes);
  EXPECT_TRUE(cluster_->ExportImage("rbd/img") == Text(through_export));
}

TEST_F(RbdExportTest, GrowableExportResizesTheImage) {
  ASSERT_TRUE(cluster_->CreateImage("img", kMiB));
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 2, /*growable=*/true), OpenRbd("img")), nullptr);
  std::vector<uint8_t> data = Pattern(4096, 3 * kMiB, 2);
  ASSERT_EQ(WriteAndSync(mountpoint, data, 3 * kMiB), 0);
  EXPECT_EQ(FileSize(mountpoint), 3 * kMiB + 4096);
  std::string image = cluster_->ExportImage("rbd/img");
  ASSERT_EQ(image.size(), 3 * kMiB + 4096);
  EXPECT_EQ(image.substr(3 * kMiB), Text(data));
  EXPECT_EQ(::truncate(mountpoint.c_str(), kMiB), 0) << std::strerror(errno);
  EXPECT_EQ(cluster_->ExportImage("rbd/img").size(), kMiB);
}

TEST_F(RbdExportTest, SecondBexdIsRefusedWhileTheFirstWritesAndReadersShare) {
  ASSERT_TRUE(cluster_->CreateImage("img", 8 * kMiB));
  const std::string first = MakeMountpoint("first");
  Daemon writer({"--blockdev", Blockdev("img"), "--export", FuseExport(first, true)});
  ASSERT_TRUE(writer.WaitMounted(first));
  std::vector<uint8_t> synced = Pattern(65536, 0, 3);
  ASSERT_EQ(WriteAndSync(first, synced, 0), 0);

  // The first keeps writing while the second tries.
  std::atomic<bool> stop{false};
  std::atomic<int> write_errors{0};
  std::thread load([&] {
    for (uint64_t i = 0; !stop; ++i) {
      if (WriteAndSync(first, Pattern(4096, 0, i), kMiB + (i % 256) * 4096) != 0) ++write_errors;
    }
  });
  const std::string second = MakeMountpoint("second");
  bexd::testing::RunResult refused =
      RunBexd({"--blockdev", Blockdev("img"), "--export", FuseExport(second, true)});
  EXPECT_EQ(refused.exit_status, 1);
  EXPECT_NE(refused.err.find("node 'rbd0': image 'rbd/img': locked for writing by another "
                             "client"),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(IsFuseMounted(second));

  // A reader starts next to the writer and sees what it synced.
  const std::string reader_mount = MakeMountpoint("reader");
  Daemon reader({"--blockdev", Blockdev("img", ",read-only=on"), "--export",
                 FuseExport(reader_mount, false)});
  ASSERT_TRUE(reader.WaitMounted(reader_mount));
  std::vector<uint8_t> read = ReadWholeFile(reader_mount);
  ASSERT_EQ(read.size(), 8 * kMiB);
  EXPECT_TRUE(std::equal(synced.begin(), synced.end(), read.begin()));
  stop = true;
  load.join();
  EXPECT_EQ(write_errors, 0);
  EXPECT_EQ(reader.SignalAndWait(SIGTERM), 0);

  // Once the writer is gone, the next bexd gets the image.
  EXPECT_EQ(writer.SignalAndWait(SIGTERM), 0);
  Daemon next({"--blockdev", Blockdev("img"), "--export", FuseExport(second, true)});
  ASSERT_TRUE(next.WaitMounted(second));
  EXPECT_EQ(WriteAndSync(second, synced, 2 * kMiB), 0);
  EXPECT_EQ(next.SignalAndWait(SIGTERM), 0);
}

TEST_F(RbdExportTest, SnapshotExportsReadOnlyNextToTheWriter) {
  ASSERT_TRUE(cluster_->CreateImage("img", 4 * kMiB));
  const std::string writer_mount = MakeMountpoint("writer");
  ASSERT_NE(Start(FuseOptions(writer_mount, true, 2), OpenRbd("img")), nullptr);
  std::vector<uint8_t> old_data = Pattern(kMiB, 0, 4), new_data = Pattern(kMiB, 0, 5);
  ASSERT_EQ(WriteAndSync(writer_mount, old_data, 0), 0);
  int status = -1;
  std::string output = cluster_->Rbd("snap create rbd/img@s1", &status);
  ASSERT_EQ(status, 0) << output;
  ASSERT_EQ(WriteAndSync(writer_mount, new_data, 0), 0);

  // Without read-only=on the snapshot is refused, as QEMU does.
  const std::string snap_mount = MakeMountpoint("snap");
  bexd::testing::RunResult refused = RunBexd(
      {"--blockdev", Blockdev("img", ",snapshot=s1"), "--export", FuseExport(snap_mount, false)});
  EXPECT_EQ(refused.exit_status, 1);
  EXPECT_NE(refused.err.find("node 'rbd0': rbd snapshots are read-only (give read-only=on)"),
            std::string::npos)
      << refused.err;

  // The snapshot's reader is a cephx user that may only read, its key in a secret file (the
  // configuration has no keyring).
  const std::string key =
      cluster_->CreateUser("reader", "mon 'profile rbd' osd 'profile rbd-read-only pool=rbd'");
  const std::string key_file = cluster_->dir() + "/reader.key";
  std::ofstream(key_file) << key << "\n";
  const std::string conf = cluster_->WriteClientConf("reader.conf", /*mon_host=*/true);
  Daemon snapshot({"--object", "secret,id=reader-key,format=base64,file=" + key_file, "--blockdev",
                   "driver=rbd,node-name=rbd0,pool=rbd,image=img,snapshot=s1,read-only=on,"
                   "user=reader,key-secret=reader-key,conf=" +
                       conf,
                   "--export", FuseExport(snap_mount, false)});
  ASSERT_TRUE(snapshot.WaitMounted(snap_mount));
  std::vector<uint8_t> snap = ReadWholeFile(snap_mount);
  ASSERT_EQ(snap.size(), 4 * kMiB);
  EXPECT_TRUE(std::equal(old_data.begin(), old_data.end(), snap.begin()));
  EXPECT_EQ(::open(snap_mount.c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EROFS);

  // The writer carries on; the snapshot does not change.
  std::vector<uint8_t> newer = Pattern(kMiB, kMiB, 6);
  ASSERT_EQ(WriteAndSync(writer_mount, newer, kMiB), 0);
  EXPECT_TRUE(ReadWholeFile(snap_mount) == snap);
  std::vector<uint8_t> head = ReadWholeFile(writer_mount);
  EXPECT_TRUE(std::equal(new_data.begin(), new_data.end(), head.begin()));
  EXPECT_TRUE(std::equal(newer.begin(), newer.end(), head.begin() + kMiB));
  EXPECT_EQ(snapshot.SignalAndWait(SIGTERM), 0);
}

// On bluestore, whose data survives the OSD's death.
class RbdOsdFailureTest : public RbdExportTest {
 protected:
  CephCluster::Store store() const override { return CephCluster::Store::kBluestore; }
};

// The OSD killed (SIGKILL) and started again while two clients write and fsync through a bexd
// process: requests fail with EIO while it is down (rados_osd_op_timeout is 5 s here), the
// daemon keeps serving, I/O works again once the OSD is back, and every block whose write and
// fsync succeeded reads back, through the export and through `rbd export`.
TEST_F(RbdOsdFailureTest, OsdKilledAndRestartedUnderLoad) {
  constexpr uint64_t kImageBytes = 32 * kMiB;
  ASSERT_TRUE(cluster_->CreateImage("img", kImageBytes));
  const std::string mountpoint = MakeMountpoint();
  Daemon daemon({"--blockdev", Blockdev("img"), "--export", FuseExport(mountpoint, true)});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));

  constexpr uint64_t kBlock = 65536;
  constexpr int kWriters = 2;
  std::mutex mutex;
  std::map<uint64_t, uint32_t> synced;  // block offset -> seed, for blocks written and fsync'ed
  std::atomic<int> eio{0}, other_errors{0}, successes{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      int fd = ::open(mountpoint.c_str(), O_RDWR | O_DIRECT);
      if (fd < 0) {
        ++other_errors;
        return;
      }
      AlignedBuffer buffer(kBlock);
      for (uint32_t round = 1; !stop; ++round) {
        // Each writer cycles through its own half of the image, a new seed each time round.
        constexpr uint64_t kBlocksEach = kImageBytes / kBlock / kWriters;
        const uint64_t offset = (w * kBlocksEach + round % kBlocksEach) * kBlock;
        FillPattern(buffer.data, kBlock, offset, round * kWriters + w);
        bool ok = ::pwrite(fd, buffer.data, kBlock, offset) == ssize_t(kBlock) && ::fsync(fd) == 0;
        if (ok) {
          ++successes;
          std::lock_guard lock(mutex);
          synced[offset] = round * kWriters + w;
          continue;
        }
        (errno == EIO ? eio : other_errors)++;
        std::lock_guard lock(mutex);
        synced.erase(offset);  // a failed write leaves the block undefined
      }
      ::close(fd);
    });
  }
  auto wait_for = [&](const std::atomic<int>& counter, int above) {
    for (int i = 0; i < 1200 && counter.load() <= above; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return counter.load() > above;
  };
  EXPECT_TRUE(wait_for(successes, 20));
  ASSERT_TRUE(cluster_->KillOsd());
  // Reads fail the same way as the writers' requests, and the daemon is still there to answer.
  {
    int fd = ::open(mountpoint.c_str(), O_RDONLY | O_DIRECT);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    AlignedBuffer buffer(4096);
    EXPECT_EQ(::pread(fd, buffer.data, 4096, kImageBytes / 2), -1);
    EXPECT_EQ(errno, EIO);
    ::close(fd);
  }
  EXPECT_TRUE(wait_for(eio, 0)) << "no EIO within 60 s of killing the OSD";
  ASSERT_TRUE(cluster_->StartOsd());
  const int before = successes.load();
  EXPECT_TRUE(wait_for(successes, before + 20)) << "writes did not resume within 60 s";
  stop = true;
  for (std::thread& writer : writers) writer.join();
  EXPECT_EQ(other_errors, 0);

  std::vector<uint8_t> through_export = ReadWholeFile(mountpoint);
  ASSERT_EQ(through_export.size(), kImageBytes);
  std::string image = cluster_->ExportImage("rbd/img");
  ASSERT_EQ(image.size(), kImageBytes);
  ASSERT_FALSE(synced.empty());
  for (const auto& [offset, seed] : synced) {
    std::vector<uint8_t> expected = Pattern(kBlock, offset, seed);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), through_export.begin() + offset))
        << "block at " << offset << " (seed " << seed << ") differs through the export";
    EXPECT_EQ(image.substr(offset, kBlock), Text(expected))
        << "block at " << offset << " (seed " << seed << ") differs in the image";
  }
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
}

}  // namespace
}  // namespace bexd::exports::testing
