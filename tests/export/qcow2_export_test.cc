// SPDX-License-Identifier: GPL-2.0-or-later
// qcow2 images served by a real bexd over real FUSE mounts, checked by QEMU's tools, never by
// bexd's own reading: QSD's manual example unchanged; images qemu-img made (v2/v3, cluster sizes,
// zlib and zstd compression, backing chains, internal snapshots) read as `qemu-img convert -O raw`
// shows them; fio's verified writes from four jobs on four queues leave an image that `qemu-img
// check` finds clean and `qemu-img compare` finds equal to what the mount showed; a SIGKILL under
// writes leaves no corruption and every fsync'ed write; discard and write-zeroes show in `qemu-img
// map`; a growable export is replaced by `cp` in whole sectors; the backing chain is locked as QEMU
// locks it; and exporting the image's file child for writing beside the qcow2 node is refused with
// QEMU's permission conflict.
#include <fcntl.h>
#include <libaio.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/bexd_process.h"
#include "tests/export/export_fixture.h"
#include "tests/support/qemu_check.h"

namespace bexd::exports::testing {
namespace {

using bexd::testing::CheckResult;
using bexd::testing::QemuCheck;

constexpr uint64_t kMiB = 1 << 20;

class Qcow2ExportTest : public FuseExportTest {
 protected:
  std::string Path(const std::string& name) const { return scratch_.path() + "/" + name; }
  // What QEMU reads from `image`.
  std::vector<uint8_t> QemuRaw(const std::string& image) {
    const std::string raw = image + ".qemu-raw";
    RunOrFail("qemu-img convert -O raw " + image + " " + raw);
    std::vector<uint8_t> bytes = ReadWholeFile(raw);
    ::unlink(raw.c_str());
    return bytes;
  }
  void ExpectClean(const std::string& image) {
    CheckResult check = QemuCheck(image);
    EXPECT_EQ(check.exit_status, 0) << check.output;
    EXPECT_EQ(check.corruptions, 0u) << check.output;
    EXPECT_EQ(check.leaks, 0u) << check.output;
  }
  // Writes `bytes` into the image at `offset` with qemu-io (the image's data comes from QEMU).
  void QemuWrite(const std::string& image, uint64_t offset, uint64_t bytes, int pattern) {
    RunOrFail("qemu-io -f qcow2 -c 'write -P " + std::to_string(pattern) + " " +
              std::to_string(offset) + " " + std::to_string(bytes) + "' " + image);
  }
  // Detaches a mount a killed daemon left behind.
  static void Detach(const std::string& mountpoint) {
    if (IsFuseMounted(mountpoint)) ::umount2(mountpoint.c_str(), MNT_DETACH);
  }
};

void WriteAt(const std::string& path, const std::vector<uint8_t>& data, uint64_t offset) {
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), offset), ssize_t(data.size()))
      << std::strerror(errno);
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
}

std::vector<uint8_t> Pattern(size_t length, uint64_t offset, uint32_t seed) {
  std::vector<uint8_t> bytes(length);
  FillPattern(bytes.data(), length, offset, seed);
  return bytes;
}

// The qemu-storage-daemon manual's FUSE example, word for word, in the image's directory: the
// qcow2 image shows as a raw file at its own path, and writes through it land in the image.
TEST_F(Qcow2ExportTest, QsdManualExampleRunsUnchanged) {
  const std::string image = Path("disk.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + image + " 64M");
  QemuWrite(image, 0, kMiB, 0x11);
  QemuWrite(image, 40 * kMiB + 512, 3 * 65536, 0x22);
  const std::vector<uint8_t> before = QemuRaw(image);

  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(::chdir(scratch_.path().c_str()), 0);
  Daemon daemon({"--blockdev", "driver=file,node-name=file,filename=disk.qcow2", "--blockdev",
                 "driver=qcow2,node-name=qcow2,file=file", "--export",
                 "type=fuse,id=export,node-name=qcow2,mountpoint=disk.qcow2,writable=on"});
  ASSERT_EQ(::chdir(cwd), 0);
  ASSERT_TRUE(daemon.WaitMounted(image));
  EXPECT_EQ(FileSize(image), 64 * kMiB);
  EXPECT_TRUE(ReadWholeFile(image) == before) << "the mount differs from qemu-img convert";

  std::vector<uint8_t> expected = before;
  for (uint64_t offset : {uint64_t{4096}, 40 * kMiB, 63 * kMiB + 12345}) {
    std::vector<uint8_t> data = Pattern(100000, offset, 7);
    WriteAt(image, data, offset);
    std::copy(data.begin(), data.end(), expected.begin() + offset);
  }
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  ASSERT_FALSE(IsFuseMounted(image));
  ExpectClean(image);
  EXPECT_TRUE(QemuRaw(image) == expected) << "qemu-img reads other data than was written";
}

// Two stop signals in a row, as GNU timeout sends them (to the daemon and to its process group):
// the second is the same stop asked twice, and the stop still flushes the image, whose metadata
// bexd caches: writes that completed without fsync are in it afterwards, and it is clean.
TEST_F(Qcow2ExportTest, TwoStopSignalsInARowStillFlushTheImage) {
  const std::string image = Path("disk.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + image + " 16M");
  Daemon daemon({"--blockdev", "driver=file,node-name=file,filename=" + image, "--blockdev",
                 "driver=qcow2,node-name=qcow2,file=file", "--export",
                 "type=fuse,id=export,node-name=qcow2,mountpoint=" + image + ",writable=on"});
  ASSERT_TRUE(daemon.WaitMounted(image));
  std::vector<uint8_t> expected(16 * kMiB, 0);
  const std::vector<uint8_t> data = Pattern(kMiB, 0, 9);
  const int fd = ::open(image.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), 0), ssize_t(data.size()))
      << std::strerror(errno);
  ::close(fd);
  std::copy(data.begin(), data.end(), expected.begin());
  daemon.Signal(SIGTERM);
  // Apart enough that the kernel does not merge the two into one pending signal.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  ASSERT_FALSE(IsFuseMounted(image));
  ExpectClean(image);
  EXPECT_TRUE(QemuRaw(image) == expected) << "writes that completed before the stop are missing";
}

// An export whose node never answers (null-co with an endless latency, and a reader waiting on
// it; in practice a hung NBD server) cannot stop, but it keeps no other export from its final
// flush: exports stop all at once. Stopped one after another, the hung one (the newest, stopped
// first) held the stop, and the second signal that ends such a stop exited with the qcow2
// image's cached metadata unwritten: the writes it had acknowledged were lost (outside audit).
TEST_F(Qcow2ExportTest, AnExportThatCannotStopKeepsNoOtherFromItsFinalFlush) {
  const std::string image = Path("disk.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + image + " 16M");
  const std::string stuck = MakeMountpoint("stuck.mnt");
  Daemon daemon({"--blockdev", "driver=file,node-name=file,filename=" + image, "--blockdev",
                 "driver=qcow2,node-name=qcow2,file=file", "--export",
                 "type=fuse,id=export,node-name=qcow2,mountpoint=" + image + ",writable=on",
                 "--blockdev",
                 "driver=null-co,node-name=hung,size=1048576,latency-ns=9223372036854775807",
                 "--export", "type=fuse,id=hung,node-name=hung,mountpoint=" + stuck});
  ASSERT_TRUE(daemon.WaitMounted(image));
  ASSERT_TRUE(daemon.WaitMounted(stuck));
  std::vector<uint8_t> expected(16 * kMiB, 0);
  const std::vector<uint8_t> data = Pattern(4 * kMiB, 0, 11);
  // No fsync: the allocations stay in the node's cached metadata until the stop flushes it.
  const int fd = ::open(image.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), kMiB), ssize_t(data.size()))
      << std::strerror(errno);
  ::close(fd);
  std::copy(data.begin(), data.end(), expected.begin() + kMiB);
  // Waits until the daemon is gone (its connection then aborts the read).
  std::thread reader([&stuck] {
    const int fd = ::open(stuck.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) return;
    AlignedBuffer buffer(4096);
    (void)::pread(fd, buffer.data, 4096, 0);
    ::close(fd);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  daemon.Signal(SIGTERM);
  // Past the 3 s in which a repeat counts as the same stop: this one ends the stop at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  const int status = daemon.SignalAndWait(SIGTERM);
  reader.join();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 1);
  ExpectClean(image);
  EXPECT_TRUE(QemuRaw(image) == expected) << "the healthy export's writes were not flushed";
}

// A backing chain of 101 qcow2 images (external snapshots taken one after another, each
// overwriting part of the one below), exported writable from the top: it reads as QEMU reads it,
// and a write that copies backing data up lands in the top image. Each layer's queues wait in one
// flat epoll set (sets nest at most 4 deep), the read-only layers' metadata threads open no
// queues on the chain below them, and a thread's file queues share one libaio context (a context
// per image and thread ran out of fs.aio-max-nr at 85 images).
TEST_F(Qcow2ExportTest, ALongBackingChainReadsAndWritesAsQemuDoes) {
  constexpr int kImages = 101;
  constexpr uint64_t kStep = 40000;
  std::string below;
  for (int i = 0; i < kImages; ++i) {
    const std::string path = Path("layer" + std::to_string(i) + ".qcow2");
    RunOrFail("qemu-img create -f qcow2 " +
              (below.empty() ? std::string() : "-b " + below + " -F qcow2 ") + path + " 16M");
    QemuWrite(path, i * kStep + 4096, 70000, 0x10 + i);
    below = path;
  }
  const std::string top = below;
  std::vector<uint8_t> expected = QemuRaw(top);
  ASSERT_EQ(expected.size(), 16 * kMiB);
  const std::string mountpoint = MakeMountpoint("chain.mnt");
  Daemon daemon({"--blockdev", "driver=qcow2,node-name=top,file.driver=file,file.filename=" + top,
                 "--export",
                 "type=fuse,id=e,node-name=top,writable=on,num-queues=2,mountpoint=" + mountpoint});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  EXPECT_TRUE(ReadWholeFile(mountpoint) == expected) << "the chain reads otherwise than in QEMU";
  // Inside a cluster layers 49 and 50 fill, so the rest of that cluster is copied up.
  const uint64_t offset = 50 * kStep + 5000;
  const std::vector<uint8_t> data = Pattern(3000, offset, 4);
  WriteAt(mountpoint, data, offset);
  std::copy(data.begin(), data.end(), expected.begin() + static_cast<ptrdiff_t>(offset));
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  ExpectClean(top);
  EXPECT_TRUE(QemuRaw(top) == expected) << "qemu-img reads other data than was written";
}

// Images as qemu-img makes them, all served by one bexd, each read through its mount and
// compared with `qemu-img convert -O raw`.
TEST_F(Qcow2ExportTest, QemuImagesReadAsQemuReadsThem) {
  struct Image {
    std::string name;
    std::string create;  // qemu-img options
    bool compress = false;
    std::string compression_type;
  };
  const std::vector<Image> images = {
      {"v2.qcow2", "-o compat=0.10"},        {"c512.qcow2", "-o cluster_size=512"},
      {"c4k.qcow2", "-o cluster_size=4096"}, {"c64k.qcow2", ""},
      {"c2m.qcow2", "-o cluster_size=2M"},   {"sub.qcow2", "-o extended_l2=on,cluster_size=128k"},
      {"r1.qcow2", "-o refcount_bits=1"},    {"zlib.qcow2", "", true, "zlib"},
      {"zstd.qcow2", "", true, "zstd"},
  };
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> mounts;  // image, mountpoint
  for (const Image& image : images) {
    const std::string path = Path(image.name);
    if (image.compress) {
      // Data in a raw file, compressed by convert -c.
      const std::string raw = Path(image.name + ".src");
      RunOrFail("qemu-img create -f raw " + raw + " 24M");
      RunOrFail(
          "qemu-io -f raw -c 'write -P 0x5a 0 5M' -c 'write -P 0 6M 1M' -c 'write -P 0x7b 9M "
          "7M' " +
          raw);
      // Incompressible data too: compressed clusters must hold whole clusters either way.
      RunOrFail("dd if=/dev/urandom of=" + raw +
                " bs=64k count=20 seek=300 conv=notrunc status=none");
      RunOrFail("qemu-img convert -c -O qcow2 -o compression_type=" + image.compression_type + " " +
                raw + " " + path);
    } else {
      RunOrFail("qemu-img create -f qcow2 " + image.create + " " + path + " 24M");
      QemuWrite(path, 0, 65536, 1);
      QemuWrite(path, 3 * kMiB + 512, 2 * kMiB + 1024, 2);
      QemuWrite(path, 24 * kMiB - 4096, 4096, 3);
      RunOrFail("qemu-io -f qcow2 -c 'write -z 3584k 64k' " + path);
    }
    const std::string mountpoint = MakeMountpoint(image.name + ".mnt");
    const std::string node = "n" + std::to_string(mounts.size());
    args.insert(
        args.end(),
        {"--blockdev",
         "driver=qcow2,node-name=" + node + ",read-only=on,file.driver=file,file.filename=" + path,
         "--export", "type=fuse,id=e" + node + ",node-name=" + node + ",mountpoint=" + mountpoint});
    mounts.emplace_back(path, mountpoint);
  }
  // Internal snapshots: the active layer is what QEMU reads; the clusters the snapshot shares
  // are read in place.
  const std::string snap = Path("snap.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + snap + " 8M");
  QemuWrite(snap, 0, 4 * kMiB, 0x31);
  RunOrFail("qemu-img snapshot -c first " + snap);
  QemuWrite(snap, kMiB, kMiB, 0x32);
  RunOrFail("qemu-img snapshot -c second " + snap);
  QemuWrite(snap, 6 * kMiB, 512, 0x33);
  const std::string snap_mount = MakeMountpoint("snap.mnt");
  args.insert(args.end(),
              {"--blockdev",
               "driver=qcow2,node-name=snap,read-only=on,file.driver=file,"
               "file.filename=" +
                   snap,
               "--export", "type=fuse,id=esnap,node-name=snap,mountpoint=" + snap_mount});
  mounts.emplace_back(snap, snap_mount);

  // A backing chain three deep, named relative to each image's directory: base (raw), mid,
  // top, each overwriting part of the one below. bexd runs elsewhere, so only the header's
  // names lead to the files.
  RunOrFail("mkdir -p " + Path("chain/sub"));
  const std::string base = Path("chain/sub/base.raw");
  RunOrFail("qemu-img create -f raw " + base + " 16M");
  RunOrFail("qemu-io -f raw -c 'write -P 0x41 0 16M' " + base);
  const std::string mid = Path("chain/sub/mid.qcow2");
  RunOrFail("qemu-img create -f qcow2 -b base.raw -F raw " + mid);
  QemuWrite(mid, 2 * kMiB, 4 * kMiB, 0x42);
  const std::string top = Path("chain/top.qcow2");
  RunOrFail("qemu-img create -f qcow2 -b sub/mid.qcow2 -F qcow2 " + top);
  QemuWrite(top, 3 * kMiB, 65536 + 512, 0x43);
  RunOrFail("qemu-io -f qcow2 -c 'write -z 5M 64k' " + top);
  const std::string top_mount = MakeMountpoint("top.mnt");
  args.insert(args.end(),
              {"--blockdev", "driver=qcow2,node-name=top,file.driver=file,file.filename=" + top,
               "--export", "type=fuse,id=etop,node-name=top,mountpoint=" + top_mount});
  mounts.emplace_back(top, top_mount);

  std::vector<std::vector<uint8_t>> expected;
  for (const auto& [image, mountpoint] : mounts) expected.push_back(QemuRaw(image));
  Daemon daemon(args);
  for (size_t i = 0; i < mounts.size(); ++i) {
    const auto& [image, mountpoint] = mounts[i];
    ASSERT_TRUE(daemon.WaitMounted(mountpoint)) << image;
    EXPECT_TRUE(ReadWholeFile(mountpoint) == expected[i]) << image << " reads other bytes";
  }
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  for (const auto& [image, mountpoint] : mounts) ExpectClean(image);
}

// fio with crc32c verification, four jobs on a four-queue export, sequential and random, over a
// fresh image and one with a backing file; then the image is clean (no leaks after a clean stop)
// and qemu-img compare finds it equal to what the mount showed.
TEST_F(Qcow2ExportTest, FioVerifiedWritesLeaveACleanEqualImage) {
  constexpr uint64_t kJobBytes = 16 * kMiB;
  const std::string base = Path("base.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + base + " 64M");
  QemuWrite(base, 0, 64 * kMiB, 0x66);
  for (bool backed : {false, true}) {
    for (std::string rw : {"randwrite", "write"}) {
      SCOPED_TRACE(std::string(backed ? "backed " : "fresh ") + rw);
      const std::string image = Path(std::string(backed ? "backed-" : "fresh-") + rw + ".qcow2");
      RunOrFail("qemu-img create -f qcow2 " +
                std::string(backed ? "-b base.qcow2 -F qcow2 " : "-o cluster_size=65536 ") + image +
                " 64M");
      const std::string mountpoint = MakeMountpoint(rw + (backed ? "-backed.mnt" : "-fresh.mnt"));
      {
        Daemon daemon(
            {"--blockdev", "driver=qcow2,node-name=fmt,file.driver=file,file.filename=" + image,
             "--export",
             "type=fuse,id=e0,node-name=fmt,writable=on,num-queues=4,mountpoint=" + mountpoint});
        ASSERT_TRUE(daemon.WaitMounted(mountpoint));
        // 12 KiB blocks straddle 64 KiB clusters: partial-cluster copy-on-write. Each job's size
        // is a multiple of the block size, or its last block would reach into the next job's
        // region and spoil that job's verification.
        constexpr uint64_t kBlock = 12 * 1024;
        int status = 0;
        const std::string output =
            RunCommand("fio --name=qcow2job --filename=" + mountpoint +
                           " --ioengine=libaio --direct=1 --iodepth=16 --rw=" + rw +
                           " --bs=" + std::to_string(kBlock) +
                           " --size=" + std::to_string(kJobBytes / kBlock * kBlock) +
                           " --numjobs=4 --offset_increment=" + std::to_string(kJobBytes) +
                           " --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0"
                           " --group_reporting",
                       &status);
        EXPECT_EQ(status, 0) << output;
        EXPECT_EQ(output.find("verify failed"), std::string::npos) << output;
        EXPECT_NE(output.find("err= 0"), std::string::npos) << output;
        // What the mount shows, to compare the image with after the stop.
        const std::string shown = image + ".shown";
        RunOrFail("dd if=" + mountpoint + " of=" + shown + " bs=1M status=none");
        EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
      }
      ASSERT_FALSE(IsFuseMounted(mountpoint));
      ExpectClean(image);
      RunOrFail("qemu-img compare -f qcow2 -F raw " + image + " " + image + ".shown");
    }
  }
}

// SIGKILL while writers are busy: qemu-img check finds no corruption (leaked clusters are
// allowed), and every write that an fsync covered before the kill is in the image.
TEST_F(Qcow2ExportTest, SigkillUnderWritesKeepsEveryFsyncedWrite) {
  constexpr uint64_t kBlock = 48 * 1024;  // not a cluster multiple: COW at both ends
  constexpr uint64_t kImageBytes = 128 * kMiB;
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy-refcounts=on" : "lazy-refcounts=off");
    const std::string base = Path("kbase.qcow2");
    if (::access(base.c_str(), F_OK) != 0) {
      RunOrFail("qemu-img create -f qcow2 " + base + " 128M");
      QemuWrite(base, 0, 128 * kMiB, 0x55);
    }
    const std::string image = Path(lazy ? "killed-lazy.qcow2" : "killed.qcow2");
    RunOrFail("qemu-img create -f qcow2 -b kbase.qcow2 -F qcow2 " + image);
    const std::string mountpoint = MakeMountpoint(lazy ? "killed-lazy.mnt" : "killed.mnt");
    Daemon daemon(
        {"--blockdev",
         std::string("driver=qcow2,node-name=fmt,lazy-refcounts=") + (lazy ? "on" : "off") +
             ",file.driver=file,file.filename=" + image,
         "--export",
         "type=fuse,id=e0,node-name=fmt,writable=on,num-queues=4,mountpoint=" + mountpoint});
    ASSERT_TRUE(daemon.WaitMounted(mountpoint));

    // Four writers, each in its own quarter, each with its own block order; each records the
    // blocks an fsync has covered.
    constexpr int kWriters = 4;
    constexpr uint64_t kBlocksPerWriter = kImageBytes / kWriters / kBlock;
    std::vector<std::vector<uint64_t>> durable(kWriters);
    std::atomic<bool> stop{false};
    std::atomic<int> fsyncs{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] {
        int fd = ::open(mountpoint.c_str(), O_WRONLY);
        if (fd < 0) return;
        std::vector<uint64_t> written;
        for (uint64_t i = 0; i < kBlocksPerWriter && !stop; ++i) {
          const uint64_t block = (i * 7919 + w) % kBlocksPerWriter;
          const uint64_t offset = w * (kImageBytes / kWriters) + block * kBlock;
          std::vector<uint8_t> data = Pattern(kBlock, offset, 9);
          if (::pwrite(fd, data.data(), kBlock, offset) != ssize_t(kBlock)) break;
          written.push_back(offset);
          if (written.size() % 8 == 0) {
            if (::fsync(fd) != 0) break;
            durable[w] = written;
            ++fsyncs;
          }
        }
        ::close(fd);
      });
    }
    // Kill once the writers have made some progress (bounded: the kill comes regardless).
    for (int i = 0; i < 3000 && fsyncs < 40; ++i) ::usleep(10000);
    EXPECT_EQ(daemon.SignalAndWait(SIGKILL), SIGKILL);
    stop = true;
    Detach(mountpoint);
    for (std::thread& writer : writers) writer.join();

    CheckResult check = QemuCheck(image);
    EXPECT_TRUE(check.exit_status == 0 || check.exit_status == 3) << check.output;  // 3: leaks
    EXPECT_EQ(check.corruptions, 0u) << check.output;
    const std::vector<uint8_t> bytes = QemuRaw(image);
    ASSERT_EQ(bytes.size(), kImageBytes);
    size_t checked = 0;
    for (const std::vector<uint64_t>& offsets : durable) {
      for (uint64_t offset : offsets) {
        std::vector<uint8_t> expected = Pattern(kBlock, offset, 9);
        ASSERT_TRUE(std::equal(expected.begin(), expected.end(), bytes.begin() + offset))
            << "fsync'ed write at " << offset << " is missing";
        ++checked;
      }
    }
    EXPECT_GT(checked, 0u);
  }
}

// With cache.no-flush the file child needs no flush, but the qcow2 node still does: an fsync
// through the mount writes its metadata caches back, so the write survives a SIGKILL (the file's
// page cache outlives the process).
TEST_F(Qcow2ExportTest, FsyncWritesMetadataBackEvenWithCacheNoFlush) {
  const std::string image = Path("noflush.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + image + " 16M");
  const std::string mountpoint = MakeMountpoint("noflush.mnt");
  Daemon daemon(
      {"--blockdev",
       "driver=qcow2,node-name=fmt,cache.no-flush=on,file.driver=file,file.filename=" + image,
       "--export", "type=fuse,id=e0,node-name=fmt,writable=on,mountpoint=" + mountpoint});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  const std::vector<uint8_t> data = Pattern(3 * 65536, 5 * kMiB, 4);
  WriteAt(mountpoint, data, 5 * kMiB);  // pwrite + fsync
  EXPECT_EQ(daemon.SignalAndWait(SIGKILL), SIGKILL);
  Detach(mountpoint);
  EXPECT_EQ(QemuCheck(image).corruptions, 0u);
  const std::vector<uint8_t> bytes = QemuRaw(image);
  ASSERT_EQ(bytes.size(), 16 * kMiB);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), bytes.begin() + 5 * kMiB))
      << "the fsync'ed write is not in the image";
}

// Discard (discard=unmap) and write-zeroes through the mount, seen by qemu-img map afterwards.
TEST_F(Qcow2ExportTest, DiscardAndWriteZeroesShowInQemuImgMap) {
  const std::string image = Path("map.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + image + " 16M");
  QemuWrite(image, 0, 16 * kMiB, 0x77);
  const std::string mountpoint = MakeMountpoint("map.mnt");
  {
    Daemon daemon(
        {"--blockdev",
         "driver=qcow2,node-name=fmt,discard=unmap,file.driver=file,file.filename=" + image,
         "--export", "type=fuse,id=e0,node-name=fmt,writable=on,mountpoint=" + mountpoint});
    ASSERT_TRUE(daemon.WaitMounted(mountpoint));
    int fd = ::open(mountpoint.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2 * kMiB, 2 * kMiB), 0)
        << std::strerror(errno);
    EXPECT_EQ(::fallocate(fd, FALLOC_FL_ZERO_RANGE, 8 * kMiB, kMiB), 0) << std::strerror(errno);
    EXPECT_EQ(::fsync(fd), 0);
    ::close(fd);
    EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  }
  ExpectClean(image);
  nlohmann::json map = nlohmann::json::parse(RunOrFail("qemu-img map --output=json " + image));
  auto zero_at = [&](uint64_t offset) {
    for (const nlohmann::json& extent : map) {
      const uint64_t start = extent["start"], length = extent["length"];
      if (offset >= start && offset < start + length) return extent["zero"].get<bool>();
    }
    return false;
  };
  EXPECT_TRUE(zero_at(2 * kMiB) && zero_at(4 * kMiB - 1)) << map.dump(1);
  EXPECT_TRUE(zero_at(8 * kMiB) && zero_at(9 * kMiB - 1)) << map.dump(1);
  EXPECT_FALSE(zero_at(kMiB) || zero_at(6 * kMiB) || zero_at(12 * kMiB)) << map.dump(1);
  std::vector<uint8_t> bytes = QemuRaw(image);
  EXPECT_EQ(std::count(bytes.begin() + 2 * kMiB, bytes.begin() + 4 * kMiB, 0), long(2 * kMiB));
  EXPECT_EQ(std::count(bytes.begin() + 8 * kMiB, bytes.begin() + 9 * kMiB, 0), long(kMiB));
  EXPECT_EQ(std::count(bytes.begin(), bytes.begin() + 2 * kMiB, 0x77), long(2 * kMiB));
}

// QEMU's locking across the graph, seen by other processes: the writable image is locked for
// writing (qemu-img info without -U refuses), its backing file is opened read-only and shared
// (qemu-img info reads it, qemu-io cannot write it).
TEST_F(Qcow2ExportTest, BackingChainIsLockedAsQemuLocksIt) {
  const std::string base = Path("lbase.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + base + " 8M");
  const std::string image = Path("ltop.qcow2");
  RunOrFail("qemu-img create -f qcow2 -b lbase.qcow2 -F qcow2 " + image);
  const std::string mountpoint = MakeMountpoint("lock.mnt");
  Daemon daemon({"--blockdev", "driver=qcow2,node-name=fmt,file.driver=file,file.filename=" + image,
                 "--export", "type=fuse,id=e0,node-name=fmt,writable=on,mountpoint=" + mountpoint});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  int status = 0;
  std::string output = RunCommand("qemu-img info " + image, &status);
  EXPECT_NE(status, 0) << output;
  EXPECT_NE(output.find("Failed to get shared \"write\" lock"), std::string::npos) << output;
  RunOrFail("qemu-img info -U " + image);
  RunOrFail("qemu-img info " + base);  // a reader shares the backing file
  output = RunCommand("qemu-io -f qcow2 -c 'write 0 4k' " + base, &status);
  EXPECT_NE(status, 0) << output;
  EXPECT_NE(output.find("Failed to get \"write\" lock"), std::string::npos) << output;
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  RunOrFail("qemu-io -f qcow2 -c 'write 0 4k' " + base);  // free again
}

// A growable export of a qcow2 image holding data, used as a file: `cp` (O_TRUNC) of a source
// whose length is not whole sectors replaces the image (the clusters past the new end freed, the
// size rounded up to 512 as a qcow2 header needs), a truncate to such a size fails with EINVAL
// as in QSD, and a later grow reads zeroes, never the old data. QSD refuses both the O_TRUNC of
// an image with data and the unaligned write.
TEST_F(Qcow2ExportTest, GrowableExportIsReplacedByCpAndKeepsWholeSectors) {
  const std::string image = Path("grow.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + image + " 16M");
  QemuWrite(image, 0, 16 * kMiB, 0x61);
  const std::string mountpoint = MakeMountpoint("grow.mnt");
  const uint64_t source_size = kMiB + 4097;
  const uint64_t rounded = kMiB + 4608;
  const std::vector<uint8_t> source = Pattern(source_size, 0, 11);
  {
    Daemon daemon(
        {"--blockdev", "driver=qcow2,node-name=fmt,file.driver=file,file.filename=" + image,
         "--export",
         "type=fuse,id=e0,node-name=fmt,writable=on,growable=on,mountpoint=" + mountpoint});
    ASSERT_TRUE(daemon.WaitMounted(mountpoint));
    int fd = ::open(mountpoint.c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::pwrite(fd, source.data(), source.size(), 0), ssize_t(source.size()))
        << std::strerror(errno);
    EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
    EXPECT_EQ(FileSize(mountpoint), rounded);
    errno = 0;
    EXPECT_EQ(::ftruncate(fd, 2 * kMiB + 100), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(FileSize(mountpoint), rounded);
    EXPECT_EQ(::ftruncate(fd, 3 * kMiB), 0) << std::strerror(errno);
    ::close(fd);
    std::vector<uint8_t> shown = ReadWholeFile(mountpoint);
    ASSERT_EQ(shown.size(), 3 * kMiB);
    EXPECT_TRUE(std::equal(source.begin(), source.end(), shown.begin()));
    EXPECT_EQ(std::count(shown.begin() + source_size, shown.end(), 0), long(3 * kMiB - source_size))
        << "the old data shows past the copied source";
    EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  }
  ExpectClean(image);
  std::vector<uint8_t> bytes = QemuRaw(image);
  ASSERT_EQ(bytes.size(), 3 * kMiB);
  EXPECT_TRUE(std::equal(source.begin(), source.end(), bytes.begin()));
  EXPECT_EQ(std::count(bytes.begin() + source_size, bytes.end(), 0), long(3 * kMiB - source_size));
}

// Keeps `depth` 64 KiB O_DIRECT writes in flight at random offsets below `limit` until `stop`;
// false if one failed.
bool WriteAsyncUntil(const std::string& path, uint64_t limit, int depth,
                     const std::atomic<bool>& stop, uint64_t seed) {
  int fd = ::open(path.c_str(), O_WRONLY | O_DIRECT);
  if (fd < 0) return false;
  io_context_t context{};
  if (io_setup(depth, &context) != 0) {
    ::close(fd);
    return false;
  }
  AlignedBuffer buffer(65536);
  FillPattern(buffer.data, 65536, 0, static_cast<uint32_t>(seed));
  std::vector<struct iocb> blocks(depth);
  auto submit = [&](struct iocb* block) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    io_prep_pwrite(block, fd, buffer.data, 65536,
                   static_cast<long long>(((seed >> 33) % (limit / 65536)) * 65536));
    struct iocb* one[1] = {block};
    return io_submit(context, 1, one) == 1;
  };
  bool ok = true;
  int in_flight = 0;
  for (struct iocb& block : blocks) in_flight += submit(&block) ? 1 : 0;
  std::vector<struct io_event> events(depth);
  while (in_flight > 0) {
    int done = io_getevents(context, 1, depth, events.data(), nullptr);
    if (done < 0) break;
    for (int i = 0; i < done; ++i) {
      --in_flight;
      if (events[i].res != 65536) ok = false;
      if (!stop.load() && submit(events[i].obj)) ++in_flight;
    }
  }
  io_destroy(context);
  ::close(fd);
  return ok && in_flight == 0;
}

// Shrinks over data while writes at queue depth 16 from two threads grow the image again, on two
// queues: a shrink runs on the queue thread that serves the truncate, so it must not wait for I/O
// that thread has in flight (the grace period of the clusters it frees). Once the race is over,
// the export still serves everywhere, stops on SIGTERM, and QEMU finds the image clean.
TEST_F(Qcow2ExportTest, ShrinksRacingGrowingWritesNeitherHangNorCorrupt) {
  const std::string image = Path("race.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + image + " 64M");
  const std::string mountpoint = MakeMountpoint("race.mnt");
  Daemon daemon({"--blockdev", "driver=qcow2,node-name=fmt,file.driver=file,file.filename=" + image,
                 "--export",
                 "type=fuse,id=e0,node-name=fmt,writable=on,growable=on,num-queues=2,mountpoint=" +
                     mountpoint});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  std::atomic<bool> stop{false};
  std::atomic<int> failed_writers{0};
  auto writer = [&](uint64_t seed) {
    if (!WriteAsyncUntil(mountpoint, 60 * kMiB, 16, stop, seed)) ++failed_writers;
  };
  std::thread first(writer, 1), second(writer, 2);
  int fd = ::open(mountpoint.c_str(), O_WRONLY);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  for (int i = 0; fd >= 0 && i < 100; ++i) {
    EXPECT_EQ(::ftruncate(fd, (32 + i % 32) * kMiB), 0) << i << ": " << std::strerror(errno);
  }
  if (fd >= 0) ::close(fd);
  stop = true;
  first.join();
  second.join();
  EXPECT_EQ(failed_writers.load(), 0);

  const std::vector<uint8_t> data = Pattern(64 * kMiB, 0, 3);
  WriteAt(mountpoint, data, 0);
  EXPECT_TRUE(ReadWholeFile(mountpoint) == data) << "the mount reads other data than was written";
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  ExpectClean(image);
  EXPECT_TRUE(QemuRaw(image) == data) << "qemu-img reads other data than was written";
}

// qcow2 cannot reserve clusters (as QEMU): fallocate(2) over the image's present bytes fails with
// EOPNOTSUPP and changes nothing, even where it would also have grown the image; one that starts
// at or past the end grows it, as QSD's does.
TEST_F(Qcow2ExportTest, FallocateFailsWithoutChangingOrGrowsFromTheEnd) {
  const std::string image = Path("falloc.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + image + " 4M");
  const std::string mountpoint = MakeMountpoint("falloc.mnt");
  Daemon daemon({"--blockdev", "driver=qcow2,node-name=fmt,file.driver=file,file.filename=" + image,
                 "--export", "type=fuse,id=e0,node-name=fmt,writable=on,mountpoint=" + mountpoint});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  const uint64_t file_bytes = FileSize(image);
  int fd = ::open(mountpoint.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // From inside the image to 1 PiB past it, and a reservation that keeps the size.
  EXPECT_EQ(::fallocate(fd, 0, 0, off_t{1} << 50), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, kMiB, 4096), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(FileSize(image), file_bytes) << "the failed calls grew the image";
  // At the end: the image grows and the new bytes read as zeroes.
  EXPECT_EQ(::fallocate(fd, 0, 4 * kMiB, 64 * 1024), 0) << std::strerror(errno);
  ::close(fd);
  EXPECT_EQ(FileSize(mountpoint), 4 * kMiB + 64 * 1024);
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  ExpectClean(image);
  const std::vector<uint8_t> contents = QemuRaw(image);
  ASSERT_EQ(contents.size(), 4 * kMiB + 64 * 1024);
  EXPECT_EQ(std::count(contents.begin(), contents.end(), 0), long(contents.size()));
}

// The qcow2 node writes its file child's metadata: exporting that child for writing beside it
// is QEMU's permission conflict (the other order: tests/control/block_graph_test.cc); a read-only
// export of it is allowed.
TEST_F(Qcow2ExportTest, WritableExportOfTheFileChildIsRefused) {
  const std::string image = Path("perm.qcow2");
  RunOrFail("qemu-img create -f qcow2 " + image + " 8M");
  const std::string mountpoint = MakeMountpoint("perm.mnt");
  bexd::testing::RunResult result = bexd::testing::RunBexd(
      {"--blockdev", "driver=file,node-name=file0,filename=" + image, "--blockdev",
       "driver=qcow2,node-name=fmt0,file=file0", "--export",
       "type=fuse,id=e0,node-name=file0,writable=on,mountpoint=" + mountpoint});
  EXPECT_EQ(result.exit_status, 1) << result.err;
  EXPECT_NE(result.err.find("Permission conflict on node 'file0': permissions 'write' are both "
                            "required by export 'e0' (uses node 'file0' as 'root' child) and "
                            "unshared by node 'fmt0' (uses node 'file0' as 'file' child)."),
            std::string::npos)
      << result.err;
  EXPECT_FALSE(IsFuseMounted(mountpoint));

  // Read-only, it may be exported: the mount shows the image file itself.
  Daemon daemon({"--blockdev", "driver=file,node-name=file0,filename=" + image, "--blockdev",
                 "driver=qcow2,node-name=fmt0,file=file0", "--export",
                 "type=fuse,id=e0,node-name=file0,mountpoint=" + mountpoint});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  std::vector<uint8_t> header = ReadWholeFile(mountpoint);
  ASSERT_GE(header.size(), 4u);
  EXPECT_EQ(std::string(header.begin(), header.begin() + 4), "QFI\xfb");
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
}

}  // namespace
}  // namespace bexd::exports::testing
