// SPDX-License-Identifier: GPL-2.0-or-later
// FUSE exports of nbd nodes served by real NBD servers: data written through the mount checked
// in the server's image (patterns, then fio with crc32c on a 4-queue export), SEEK_DATA and
// SEEK_HOLE through the mount against `qemu-img map`, hole punching and zeroing, and a bexd
// daemon whose server is killed and started again under load, or stopped cleanly (NBD_ESHUTDOWN),
// and a flush after a lost connection that may have taken acknowledged writes.
#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "block/open.h"
#include "export/fuse_uring/kernel_support.h"
#include "tests/export/export_fixture.h"
#include "tests/support/nbd_server.h"
#include "tests/support/qemu_check.h"
#include "tests/support/threads.h"
#include "tests/support/tls_certificates.h"

namespace bexd::exports::testing {
namespace {

using bexd::testing::HaveProgram;
using bexd::testing::NbdServer;

constexpr uint64_t kMiB = 1 << 20;

std::vector<uint8_t> Pattern(size_t length, uint64_t offset, uint32_t seed) {
  std::vector<uint8_t> bytes(length);
  FillPattern(bytes.data(), length, offset, seed);
  return bytes;
}

void WriteAt(const std::string& path, const std::vector<uint8_t>& data, uint64_t offset) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  EXPECT_EQ(::pwrite(fd, data.data(), data.size(), offset), ssize_t(data.size()))
      << path << ": " << std::strerror(errno);
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
}

std::vector<uint8_t> Slice(const std::vector<uint8_t>& bytes, uint64_t offset, uint64_t length) {
  return std::vector<uint8_t>(bytes.begin() + offset, bytes.begin() + offset + length);
}

// The data extents [start, end) that SEEK_DATA and SEEK_HOLE walk in `path`.
std::vector<std::pair<uint64_t, uint64_t>> SeekExtents(const std::string& path) {
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  off_t position = 0;
  while (fd >= 0) {
    const off_t data = ::lseek(fd, position, SEEK_DATA);
    if (data < 0) {
      EXPECT_EQ(errno, ENXIO) << std::strerror(errno);
      break;
    }
    const off_t hole = ::lseek(fd, data, SEEK_HOLE);
    EXPECT_GT(hole, data) << std::strerror(errno);
    if (hole <= data) break;
    extents.emplace_back(data, hole);
    position = hole;
  }
  if (fd >= 0) ::close(fd);
  return extents;
}

// The data extents `qemu-img map` reports for a raw image, adjacent ones merged.
std::vector<std::pair<uint64_t, uint64_t>> QemuImgMapExtents(const std::string& image) {
  int status = 0;
  const std::string output =
      RunCommand("qemu-img map --output=json -f raw '" + image + "' 2>/dev/null", &status);
  EXPECT_EQ(status, 0) << output;
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  if (status != 0) return extents;
  for (const auto& entry : nlohmann::json::parse(output)) {
    if (!entry["data"].get<bool>()) continue;
    const uint64_t start = entry["start"].get<uint64_t>();
    const uint64_t end = start + entry["length"].get<uint64_t>();
    if (!extents.empty() && extents.back().second == start) {
      extents.back().second = end;
    } else {
      extents.emplace_back(start, end);
    }
  }
  return extents;
}

class NbdExportTest : public FuseExportTest {
 protected:
  void SetUp() override {
    if (!HaveProgram("nbdkit") || !HaveProgram("qemu-nbd") || !HaveProgram("qemu-img")) {
      GTEST_SKIP() << "nbdkit, qemu-nbd or qemu-img is missing";
    }
    socket_ = scratch_.path() + "/nbd.sock";
  }

  // Starts `command` (which must write PidFile() once it serves on socket_).
  NbdServer* Serve(const std::vector<std::string>& command) {
    server_ =
        std::make_unique<NbdServer>(command, PidFile(), scratch_.path() + "/server.log", socket_);
    if (!server_->Start()) {
      ADD_FAILURE() << server_->why_not();
      return nullptr;
    }
    return server_.get();
  }

  // qemu-nbd on a raw image; `clients` > 1 makes it advertise multi-conn.
  NbdServer* ServeWithQemuNbd(const std::string& image, int clients, bool read_only = false) {
    std::vector<std::string> command = {"qemu-nbd", "-t",    "-e",         std::to_string(clients),
                                        "-k",       socket_, "--pid-file", PidFile(),
                                        "-f",       "raw"};
    if (read_only) command.push_back("-r");
    command.push_back(image);
    return Serve(command);
  }

  std::shared_ptr<block::BlockNode> OpenNbd(
      bool read_only = false, block::DiscardMode discard = block::DiscardMode::kIgnore) {
    block::NbdOptions nbd;
    nbd.transport = block::NbdOptions::Transport::kUnix;
    nbd.path = socket_;
    nbd.discard = discard;
    block::BlockdevOptions options;
    options.node_name = "nbd0";
    options.read_only = read_only;
    options.driver = nbd;
    absl::StatusOr<std::shared_ptr<block::BlockNode>> node = block::OpenBlockNode(options);
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? *node : nullptr;
  }

  std::string PidFile() const { return scratch_.path() + "/server.pid"; }

  std::string socket_;
  // Declared after the fixture's exports, so it goes after them (they flush when they stop).
  std::unique_ptr<NbdServer> server_;
};

// qemu-nbd allows one client by default (a shared connection) and advertises multi-conn with
// -e N (a connection per queue).
class NbdExportDataTest : public NbdExportTest, public ::testing::WithParamInterface<int> {};

TEST_P(NbdExportDataTest, PatternsAndFioMatchTheServersImage) {
  constexpr uint64_t kJobBytes = 8 * kMiB;
  constexpr uint64_t kSize = 4 * kJobBytes;
  const std::string image = scratch_.CreateFile("image", kSize);
  std::vector<uint8_t> expected = Pattern(kSize, 0, 1);
  WriteAt(image, expected, 0);
  ASSERT_NE(ServeWithQemuNbd(image, GetParam()), nullptr);
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(FuseOptions(mountpoint, true, 4), OpenNbd());
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(FileSize(mountpoint), kSize);
  EXPECT_EQ(ReadWholeFile(mountpoint), expected);

  // Aligned, unaligned, large and last-byte writes through the export land in the image.
  for (auto [offset, length] : {std::pair<uint64_t, uint64_t>{0, 4096},
                                {12345, 100000},
                                {5 * kMiB + 7, 3 * kMiB},
                                {kSize - 65536, 65536}}) {
    std::vector<uint8_t> data = Pattern(length, offset, 2);
    WriteAt(mountpoint, data, offset);
    std::copy(data.begin(), data.end(), expected.begin() + offset);
  }
  EXPECT_TRUE(ReadWholeFile(image) == expected) << "the server's image differs";
  EXPECT_TRUE(ReadWholeFile(mountpoint) == expected) << "the export reads back differently";

  ExpectFioVerifies(running, mountpoint, kJobBytes);
  EXPECT_TRUE(ReadWholeFile(mountpoint) == ReadWholeFile(image))
      << "the export and the server's image differ after fio";
}

INSTANTIATE_TEST_SUITE_P(QemuNbdClients, NbdExportDataTest, ::testing::Values(1, 8),
                         [](const auto& info) {
                           return info.param == 1 ? std::string("SharedConnection")
                                                  : std::string("ConnectionPerQueue");
                         });

TEST_F(NbdExportTest, SeekDataAndHoleMatchQemuImgMap) {
  constexpr uint64_t kSize = 32 * kMiB;
  const std::string image = scratch_.CreateFile("sparse.img", kSize);
  for (auto [offset, length] : {std::pair<uint64_t, uint64_t>{0, 65536},
                                {kMiB + 4096, 2 * kMiB},
                                {10 * kMiB, 4096},
                                {20 * kMiB, 3 * kMiB},
                                {kSize - 65536, 65536}}) {
    WriteAt(image, Pattern(length, offset, 3), offset);
  }
  const auto expected = QemuImgMapExtents(image);
  ASSERT_EQ(expected.size(), 5u);
  ASSERT_NE(ServeWithQemuNbd(image, 1, /*read_only=*/true), nullptr);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, false, 2), OpenNbd(/*read_only=*/true)), nullptr);
  EXPECT_EQ(SeekExtents(mountpoint), expected);
  // Holes read as zeroes, data as written.
  const std::vector<uint8_t> bytes = ReadWholeFile(mountpoint);
  EXPECT_EQ(Slice(bytes, 65536, kMiB + 4096 - 65536), std::vector<uint8_t>(kMiB + 4096 - 65536, 0));
  EXPECT_EQ(Slice(bytes, 10 * kMiB, 4096), Pattern(4096, 10 * kMiB, 3));
}

TEST_F(NbdExportTest, PunchHoleAndZeroRangeReachTheServer) {
  constexpr uint64_t kSize = 8 * kMiB;
  const std::string image = scratch_.CreateFile("image", kSize);
  std::vector<uint8_t> expected = Pattern(kSize, 0, 4);
  WriteAt(image, expected, 0);
  ASSERT_NE(Serve({"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "file", image}), nullptr);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 2), OpenNbd(false, block::DiscardMode::kUnmap)),
            nullptr);

  const int fd = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // With discard=unmap, punching becomes a write-zeroes the server may unmap: nbdkit punches the
  // image too.
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kMiB, kMiB), 0)
      << std::strerror(errno);
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_ZERO_RANGE, 4 * kMiB + 512, 65536), 0)
      << std::strerror(errno);
  // The space cannot be reserved over NBD (QEMU's FUSE export answers the same).
  EXPECT_EQ(::fallocate(fd, 0, 0, 4096), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ::close(fd);
  std::fill(expected.begin() + kMiB, expected.begin() + 2 * kMiB, 0);
  std::fill(expected.begin() + 4 * kMiB + 512, expected.begin() + 4 * kMiB + 512 + 65536, 0);
  EXPECT_TRUE(ReadWholeFile(image) == expected) << "the server's image differs";
  EXPECT_TRUE(ReadWholeFile(mountpoint) == expected) << "the export reads back differently";
  // The punched MiB is a hole in the image, and the export shows the image's extents.
  const std::vector<std::pair<uint64_t, uint64_t>> extents = SeekExtents(image);
  ASSERT_GE(extents.size(), 2u);
  EXPECT_EQ(extents[0], std::make_pair(uint64_t{0}, kMiB));
  EXPECT_EQ(extents[1].first, 2 * kMiB);
  EXPECT_EQ(SeekExtents(mountpoint), extents);
}

// A server that refuses requests not aligned to its 4 KiB minimum block size: the export still
// reads, writes and zeroes at any offset and length, as QSD's does.
TEST_F(NbdExportTest, AServerWithAMinimumBlockSizeServesAnyOffsetAndLength) {
  constexpr uint64_t kSize = 8 * kMiB;
  const std::string image = scratch_.CreateFile("image", kSize);
  std::vector<uint8_t> expected = Pattern(kSize, 0, 5);
  WriteAt(image, expected, 0);
  ASSERT_NE(Serve({"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "--filter=blocksize-policy",
                   "file", image, "blocksize-minimum=4096", "blocksize-error-policy=error"}),
            nullptr);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 2), OpenNbd()), nullptr);

  const int fd = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::vector<uint8_t> small(777);
  EXPECT_EQ(::pread(fd, small.data(), small.size(), 4097), 777) << std::strerror(errno);
  EXPECT_EQ(small, Slice(expected, 4097, 777));
  for (auto [offset, length] : {std::pair<uint64_t, uint64_t>{7, 5},
                                {12345, 100000},
                                {5 * kMiB + 7, 3000},
                                {kSize - 100, 100}}) {
    std::vector<uint8_t> data = Pattern(length, offset, 6);
    EXPECT_EQ(::pwrite(fd, data.data(), length, offset), static_cast<ssize_t>(length))
        << length << " bytes at " << offset << ": " << std::strerror(errno);
    std::copy(data.begin(), data.end(), expected.begin() + offset);
  }
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_ZERO_RANGE, 4 * kMiB + 512, 10000), 0)
      << std::strerror(errno);
  std::fill_n(expected.begin() + 4 * kMiB + 512, 10000, 0);
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
  EXPECT_TRUE(ReadWholeFile(image) == expected) << "the server's image differs";
  EXPECT_TRUE(ReadWholeFile(mountpoint) == expected) << "the export reads back differently";
}

// discard=ignore (QEMU's default): a punched range reads as zeroes but the server writes them,
// so the image keeps the range allocated.
TEST_F(NbdExportTest, PunchHoleWithDiscardIgnoreLeavesTheServerAllocated) {
  constexpr uint64_t kSize = 4 * kMiB;
  const std::string image = scratch_.CreateFile("image", kSize);
  std::vector<uint8_t> expected = Pattern(kSize, 0, 6);
  WriteAt(image, expected, 0);
  ASSERT_NE(Serve({"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "file", image}), nullptr);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 2), OpenNbd()), nullptr);
  const int fd = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kMiB, kMiB), 0)
      << std::strerror(errno);
  ::close(fd);
  std::fill(expected.begin() + kMiB, expected.begin() + 2 * kMiB, 0);
  EXPECT_TRUE(ReadWholeFile(image) == expected) << "the server's image differs";
  struct stat st {};
  ASSERT_EQ(::stat(image.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, kSize) << "the server unmapped the range";
}

// A qcow2 image over a server whose flush fails once (nbdkit's eval plugin, flushing through
// sync(1) unless a trigger file exists). A disk may drop whatever was written since its last good
// flush when one fails, and which of it is unknown: tables written afterwards could point at
// clusters whose refcounts were lost (an outside audit got corrupt images and a write lost
// after a later fsync returned 0). So from the failure on, no metadata is written back: the
// next allocating write and every later fsync fail with EIO (on the old code they succeeded),
// the stop reports it, and the image QEMU checks has leaks at most, the data flushed before
// intact.
TEST_F(NbdExportTest, AfterAFailedFlushQcow2WritesNoMetadataAndFlushesFail) {
  constexpr uint64_t kBlock = 4096;
  const std::string image = scratch_.path() + "/disk.raw";
  const std::string trigger = scratch_.path() + "/flush-fails";
  RunOrFail("qemu-img create -q -f qcow2 " + image + ".qcow2 1G && truncate -s 64M " + image +
            " && dd if=" + image + ".qcow2 of=" + image + " conv=notrunc status=none");
  ASSERT_NE(
      Serve({"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "eval",
             "get_size=stat -L -c %s " + image,
             "pread=dd if=" + image + " skip=$4 count=$3 iflag=skip_bytes,count_bytes status=none",
             "pwrite=dd of=" + image + " seek=$4 oflag=seek_bytes conv=notrunc status=none",
             "can_write=exit 0", "can_flush=exit 0",
             "flush=if [ -e " + trigger +
                 " ]; then echo 'EIO flush failed' >&2; exit 1; fi; "
                 "sync " +
                 image}),
      nullptr);
  const std::string mountpoint = MakeMountpoint();
  Daemon daemon(
      {"--blockdev", "driver=nbd,node-name=n,server.type=unix,server.path=" + socket_, "--blockdev",
       "driver=qcow2,node-name=q,file=n", "--export",
       "type=fuse,id=e,node-name=q,writable=on,mountpoint=" + mountpoint + TestIoUringOption()});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  const int fd = ::open(mountpoint.c_str(), O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  AlignedBuffer buffer(kBlock);
  FillPattern(buffer.data, kBlock, 0, 3);
  ASSERT_EQ(::pwrite(fd, buffer.data, kBlock, 0), ssize_t(kBlock)) << std::strerror(errno);
  ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);

  RunOrFail("touch " + trigger);
  ASSERT_EQ(::pwrite(fd, buffer.data, kBlock, 600 * kMiB), ssize_t(kBlock)) << std::strerror(errno);
  errno = 0;
  EXPECT_EQ(::fsync(fd), -1);
  EXPECT_EQ(errno, EIO);
  RunOrFail("rm " + trigger);

  // The server flushes again; the node does not trust it.
  errno = 0;
  EXPECT_EQ(::pwrite(fd, buffer.data, kBlock, 8 * kMiB), -1) << "an allocating write succeeded";
  EXPECT_EQ(errno, EIO);
  errno = 0;
  EXPECT_EQ(::fsync(fd), -1) << "an fsync after the failed flush succeeded";
  EXPECT_EQ(errno, EIO);
  ::close(fd);
  const int status = daemon.SignalAndWait(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 1) << "the stop did not report the lost metadata";
  server_->Kill();

  const bexd::testing::CheckResult check = bexd::testing::QemuCheck(image);
  EXPECT_EQ(check.corruptions, 0u) << check.output;
  RunOrFail("qemu-io -r -f qcow2 -c 'read -P 0 4096 4096' " + image);
  const std::vector<uint8_t> data = Pattern(kBlock, 0, 3);
  RunOrFail("qemu-img dd -f qcow2 -O raw if=" + image + " of=" + scratch_.path() +
            "/first bs=4096 count=1");
  EXPECT_TRUE(ReadWholeFile(scratch_.path() + "/first") == data)
      << "data flushed before the failure is gone";
}

// A bexd daemon writes through its FUSE export in rounds (every 64 KiB block of the first MiB
// with one pattern, then fsync) while its server is killed and started again.
class NbdServerRestartTest : public NbdExportTest {
 protected:
  static constexpr uint64_t kBlock = 65536;
  static constexpr int kBlocks = 16;

  struct Writer {
    std::atomic<bool> stop{false};
    std::atomic<int> flushed_round{-1};  // the last round whose writes and fsync all succeeded
    std::atomic<int> eio{0};             // writes failed with EIO
    std::atomic<int> flush_eio{0};       // fsyncs failed with EIO
    std::atomic<int> other_errors{0};
  };

  static void Write(const std::string& mountpoint, Writer* writer) {
    const int fd = ::open(mountpoint.c_str(), O_WRONLY);
    if (fd < 0) {
      ++writer->other_errors;
      return;
    }
    for (int round = 0; !writer->stop.load(); ++round) {
      bool ok = true;
      for (int block = 0; block < kBlocks; ++block) {
        std::vector<uint8_t> data = Pattern(kBlock, block * kBlock, 100 + round);
        ok &= Count(writer, ::pwrite(fd, data.data(), kBlock, block * kBlock) == ssize_t(kBlock));
      }
      const bool flushed = ::fsync(fd) == 0;
      if (!flushed && errno == EIO) {
        ++writer->flush_eio;
      } else {
        ok &= Count(writer, flushed);
      }
      ok &= flushed;
      if (ok) writer->flushed_round = round;
      if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::close(fd);
  }

  static bool Count(Writer* writer, bool ok) {
    if (!ok) ++(errno == EIO ? writer->eio : writer->other_errors);
    return ok;
  }

  // bexd exporting the nbd node of the server on socket_ over FUSE at `mountpoint`.
  std::vector<std::string> DaemonArgs(const std::string& mountpoint, uint32_t reconnect_delay,
                                      int queues) const {
    return {"--blockdev",
            "nbd,node-name=n0,server.type=unix,server.path=" + socket_ +
                ",reconnect-delay=" + std::to_string(reconnect_delay),
            "--export",
            "fuse,id=e0,node-name=n0,writable=on,num-queues=" + std::to_string(queues) +
                ",mountpoint=" + mountpoint};
  }

  template <typename Condition>
  static bool WaitFor(Condition condition, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  // Each block of the image holds the pattern of round `round` or of the round after it (which
  // may have been under way): flushed data is never lost or torn.
  void ExpectFlushedRoundIntact(const std::string& image, int round) {
    const std::vector<uint8_t> bytes = ReadWholeFile(image);
    for (int block = 0; block < kBlocks; ++block) {
      const std::vector<uint8_t> held = Slice(bytes, block * kBlock, kBlock);
      EXPECT_TRUE(held == Pattern(kBlock, block * kBlock, 100 + round) ||
                  held == Pattern(kBlock, block * kBlock, 101 + round))
          << "block " << block << " lost round " << round;
    }
  }

  void RunRestart(uint32_t reconnect_delay, const std::vector<std::string>& server_command,
                  const std::string& image) {
    NbdServer* server = Serve(server_command);
    ASSERT_NE(server, nullptr);
    const std::string mountpoint = MakeMountpoint();
    Daemon daemon(DaemonArgs(mountpoint, reconnect_delay, 2));
    ASSERT_TRUE(daemon.WaitMounted(mountpoint));
    Writer writer;
    std::thread thread(&NbdServerRestartTest::Write, mountpoint, &writer);
    const bool loaded =
        WaitFor([&] { return writer.flushed_round >= 3; }, std::chrono::seconds(60));
    EXPECT_TRUE(loaded) << "the writer did not get going";

    server->Kill();
    if (reconnect_delay == 0) {
      // Requests fail at once while the server is away.
      EXPECT_TRUE(
          WaitFor([&] { return writer.eio + writer.flush_eio > 0; }, std::chrono::seconds(30)));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    const int before = writer.flushed_round;
    ExpectFlushedRoundIntact(image, before);

    ASSERT_TRUE(server->Start()) << server->why_not();
    EXPECT_TRUE(
        WaitFor([&] { return writer.flushed_round >= before + 3; }, std::chrono::seconds(60)))
        << "service did not resume";
    writer.stop = true;
    thread.join();
    if (reconnect_delay > 0) {
      // Writes wait for the server; a flush may report that the crash took acknowledged writes
      // (at most once per connection lost).
      EXPECT_EQ(writer.eio.load(), 0) << "writes failed within the delay";
      EXPECT_LE(writer.flush_eio.load(), 2);
    }
    EXPECT_EQ(writer.other_errors.load(), 0);
    EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
    ExpectFlushedRoundIntact(image, writer.flushed_round);
  }
};

TEST_F(NbdServerRestartTest, QemuNbdKilledRequestsFailUntilItIsBack) {
  const std::string image = scratch_.CreateFile("image", 16 * kMiB);
  RunRestart(0, {"qemu-nbd", "-t", "-k", socket_, "--pid-file", PidFile(), "-f", "raw", image},
             image);
}

TEST_F(NbdServerRestartTest, NbdkitKilledWithinTheDelayRequestsWait) {
  const std::string image = scratch_.CreateFile("image", 16 * kMiB);
  RunRestart(120, {"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "file", image}, image);
}

// With reconnect-delay=0, an idle queue notices that its server went away only with its next
// request. When the server is back by then, that request is served over a new connection instead
// of failing: requests fail only once a reconnect attempt has failed (QEMU, which watches every
// connection, reconnects in the background meanwhile).
TEST_F(NbdServerRestartTest, AServerBackBeforeTheNextRequestServesIt) {
  const std::string image = scratch_.CreateFile("image", 16 * kMiB);
  NbdServer* server = Serve({"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "file", image});
  ASSERT_NE(server, nullptr);
  const std::string mountpoint = MakeMountpoint();
  Daemon daemon(DaemonArgs(mountpoint, 0, 2));
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  const int fd = ::open(mountpoint.c_str(), O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  AlignedBuffer buffer(kBlock);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Both queues get requests, so both connections are up before the server goes.
    for (int block = 0; block < 4; ++block) {
      FillPattern(buffer.data, kBlock, block * kBlock, 10 * round + block);
      ASSERT_EQ(::pwrite(fd, buffer.data, kBlock, block * kBlock), ssize_t(kBlock))
          << std::strerror(errno);
    }
    ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
    server->Kill();
    ASSERT_TRUE(server->Start()) << server->why_not();
    for (int block = 0; block < 4; ++block) {
      FillPattern(buffer.data, kBlock, block * kBlock, 10 * round + block + 5);
      ASSERT_EQ(::pwrite(fd, buffer.data, kBlock, block * kBlock), ssize_t(kBlock))
          << "block " << block << ": " << std::strerror(errno);
    }
    ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
    const std::vector<uint8_t> bytes = ReadWholeFile(image);
    for (int block = 0; block < 4; ++block) {
      EXPECT_EQ(Slice(bytes, block * kBlock, kBlock),
                Pattern(kBlock, block * kBlock, 10 * round + block + 5))
          << "block " << block;
    }
  }
  ::close(fd);
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
}

// A stop waits for the requests in flight, and a server that never answers keeps it waiting: a
// second SIGTERM, once the stop has run for ForcedExit's grace of 3 s, then exits at once with
// status 1 and detaches the mount, so the mountpoint is not left failing with ENOTCONN. A repeat
// before that changes nothing.
TEST_F(NbdServerRestartTest, ASecondSignalEndsAStopThatWaitsForAServerThatNeverAnswers) {
  const std::string image = scratch_.CreateFile("image", 16 * kMiB);
  NbdServer* server = Serve({"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "--filter=delay",
                             "file", image, "delay-write=600"});
  ASSERT_NE(server, nullptr);
  const std::string mountpoint = MakeMountpoint();
  Daemon daemon(DaemonArgs(mountpoint, 0, 1));
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  std::atomic<int> write_errno{-1};
  std::thread writer([&] {
    const int fd = ::open(mountpoint.c_str(), O_WRONLY | O_DIRECT);
    AlignedBuffer buffer(kBlock);
    FillPattern(buffer.data, kBlock, 0, 3);
    const bool written = fd >= 0 && ::pwrite(fd, buffer.data, kBlock, 0) == ssize_t(kBlock);
    write_errno = written ? 0 : errno;
    if (fd >= 0) ::close(fd);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the write waits on the server
  const auto first_signal = std::chrono::steady_clock::now();
  daemon.Signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(IsFuseMounted(mountpoint)) << "the first signal should wait for the write";
  daemon.Signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(IsFuseMounted(mountpoint)) << "a repeat within the grace should change nothing";
  std::this_thread::sleep_until(first_signal + std::chrono::milliseconds(3500));
  const int status = daemon.SignalAndWait(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_FALSE(IsFuseMounted(mountpoint));
  writer.join();
  EXPECT_NE(write_errno.load(), 0) << "the write cannot have succeeded";
}

// A server stopped cleanly (SIGTERM, as `systemctl restart` sends) answers NBD_ESHUTDOWN and waits
// for its clients to leave: bexd disconnects, so the old server exits, and the reads that met it
// are served by the next server instead of failing. With one connection per queue (multi-conn)
// and with one shared connection.
class NbdServerStopTest : public NbdServerRestartTest,
                          public ::testing::WithParamInterface<bool> {};

TEST_P(NbdServerStopTest, AServerShuttingDownIsLeftAndTheNextOneServes) {
  const bool multi_conn = GetParam();
  const std::string image = scratch_.CreateFile("image", 16 * kMiB);
  std::vector<std::string> command = {"nbdkit", "-f", "-U", socket_, "-P", PidFile()};
  if (!multi_conn) command.push_back("--filter=multi-conn");
  command.insert(command.end(), {"file", image});
  if (!multi_conn) command.push_back("multi-conn-mode=disable");
  NbdServer* server = Serve(command);
  ASSERT_NE(server, nullptr);
  const std::string mountpoint = MakeMountpoint();
  Daemon daemon(DaemonArgs(mountpoint, 60, 2));
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  const std::vector<uint8_t> data = Pattern(kBlock, 0, 5);
  WriteAt(mountpoint, data, 0);

  // Reads every 50 ms until told to stop; each must return the data.
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::atomic<int> failures{0};
  std::thread reader([&] {
    AlignedBuffer buffer(kBlock);
    const int fd = ::open(mountpoint.c_str(), O_RDONLY | O_DIRECT);
    while (fd >= 0 && !stop) {
      const bool ok = ::pread(fd, buffer.data, kBlock, 0) == ssize_t(kBlock) &&
                      std::equal(data.begin(), data.end(), buffer.data);
      ++(ok ? reads : failures);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (fd < 0) ++failures;
    if (fd >= 0) ::close(fd);
  });
  ASSERT_TRUE(WaitFor([&] { return reads > 0; }, std::chrono::seconds(20)));
  server->Signal(SIGTERM);
  EXPECT_TRUE(server->WaitExit(std::chrono::seconds(20)))
      << "the stopping server still waits for bexd to disconnect";
  ASSERT_TRUE(server->Start()) << server->why_not();
  const int before = reads;
  EXPECT_TRUE(WaitFor([&] { return reads >= before + 3; }, std::chrono::seconds(60)))
      << "reads did not resume on the new server";
  stop = true;
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  const std::vector<uint8_t> more = Pattern(kBlock, kBlock, 6);
  WriteAt(mountpoint, more, kBlock);
  EXPECT_EQ(Slice(ReadWholeFile(image), kBlock, kBlock), more);
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
}

INSTANTIATE_TEST_SUITE_P(Connections, NbdServerStopTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "MultiConn" : "SharedConnection";
                         });

// Writes a server acknowledged may sit in its volatile cache until a flush: when the connection is
// lost before one, the next fsync fails with EIO (the server may have crashed with them), once;
// a connection lost with everything flushed fails nothing.
TEST_F(NbdServerRestartTest, AFlushAfterALostConnectionReportsUnflushedWrites) {
  const std::string image = scratch_.CreateFile("image", 16 * kMiB);
  NbdServer* server = Serve({"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "file", image});
  ASSERT_NE(server, nullptr);
  const std::string mountpoint = MakeMountpoint();
  Daemon daemon(DaemonArgs(mountpoint, 60, 1));
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  // One descriptor throughout: a close would flush.
  const int fd = ::open(mountpoint.c_str(), O_WRONLY | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  AlignedBuffer buffer(kBlock);
  FillPattern(buffer.data, kBlock, 0, 7);
  ASSERT_EQ(::pwrite(fd, buffer.data, kBlock, 0), ssize_t(kBlock)) << std::strerror(errno);
  ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);

  // Everything flushed: losing the connection loses nothing.
  server->Kill();
  ASSERT_TRUE(server->Start()) << server->why_not();
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);

  // Acknowledged, not flushed, then the server is gone.
  ASSERT_EQ(::pwrite(fd, buffer.data, kBlock, kBlock), ssize_t(kBlock)) << std::strerror(errno);
  server->Kill();
  ASSERT_TRUE(server->Start()) << server->why_not();
  errno = 0;
  EXPECT_EQ(::fsync(fd), -1);
  EXPECT_EQ(errno, EIO);
  // Reported once; what is written again is flushed as usual.
  ASSERT_EQ(::pwrite(fd, buffer.data, kBlock, kBlock), ssize_t(kBlock)) << std::strerror(errno);
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
  const std::vector<uint8_t> bytes = ReadWholeFile(image);
  EXPECT_EQ(Slice(bytes, 0, kBlock), Pattern(kBlock, 0, 7));
  EXPECT_EQ(Slice(bytes, kBlock, kBlock), Pattern(kBlock, 0, 7));
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
}

// TLS as a QSD command line gives it (--object tls-creds-x509, tls-creds=): data reaches the
// server's file through a FUSE export, also after the server was killed and came back (the node
// reconnects with the credentials it looked up at open).
TEST_F(NbdServerRestartTest, AnExportOverTlsServesAndReconnects) {
  if (!HaveProgram("openssl")) GTEST_SKIP() << "openssl is missing";
  const std::string pki = scratch_.path() + "/pki";
  const std::string failed = bexd::testing::MakeTlsCertificates(pki, "localhost");
  ASSERT_TRUE(failed.empty()) << failed;
  const std::string image = scratch_.CreateFile("image", 16 * kMiB);
  NbdServer* server = Serve({"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "--tls=require",
                             "--tls-certificates=" + pki + "/server", "file", image});
  ASSERT_NE(server, nullptr);
  const std::string mountpoint = MakeMountpoint();
  std::vector<std::string> args = DaemonArgs(mountpoint, 60, 2);
  args[1] += ",tls-creds=tls0";
  args.insert(args.begin(),
              {"--object", "tls-creds-x509,id=tls0,endpoint=client,dir=" + pki + "/client"});
  Daemon daemon(args);
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  const int fd = ::open(mountpoint.c_str(), O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  AlignedBuffer buffer(kBlock);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    FillPattern(buffer.data, kBlock, 0, 40 + round);
    ASSERT_EQ(::pwrite(fd, buffer.data, kBlock, round * kBlock), ssize_t(kBlock))
        << std::strerror(errno);
    ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
    const std::vector<uint8_t> bytes = ReadWholeFile(image);
    EXPECT_EQ(Slice(bytes, round * kBlock, kBlock), Pattern(kBlock, 0, 40 + round));
    server->Kill();
    ASSERT_TRUE(server->Start()) << server->why_not();
  }
  ::close(fd);
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
}

// The same with one connection per CPU (a multi-conn server, FUSE over io_uring): the writes go
// on CPU 0's connection and the fsync on CPU 1's. The server is killed while CPU 0's queue is
// idle, so only CPU 1's connection finds itself lost before the flush; it must see that CPU 0's
// socket was closed too, with writes the new server never had (nbdkit's memory plugin starts
// empty).
TEST_F(NbdServerRestartTest, AFlushOnAnotherConnectionReportsUnflushedWritesOfALostOne) {
  const FuseUringSupport support = ReadFuseUringSupport();
  if (!support.enabled) GTEST_SKIP() << support.why_not;
  const absl::StatusOr<uint32_t> cpus = PossibleCpuCount();
  const std::vector<int> allowed = bexd::testing::ProcessCpus();
  if (!cpus.ok() || *cpus < 2 || allowed.size() < 2) GTEST_SKIP() << "needs two CPUs";
  NbdServer* server = Serve({"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "memory", "16M"});
  ASSERT_NE(server, nullptr);
  const std::string mountpoint = MakeMountpoint();
  std::vector<std::string> args = DaemonArgs(mountpoint, 60, 1);
  args.back() += ",io-uring=on";
  Daemon daemon(args);
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  const int fd = ::open(mountpoint.c_str(), O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  auto on_cpu = [](int cpu, auto work) {
    std::thread thread([&] {
      ASSERT_TRUE(bexd::testing::PinCallingThread(cpu)) << std::strerror(errno);
      work();
    });
    thread.join();
  };
  AlignedBuffer buffer(kBlock);
  FillPattern(buffer.data, kBlock, 0, 11);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    on_cpu(allowed[0], [&] {
      EXPECT_EQ(::pwrite(fd, buffer.data, kBlock, 0), ssize_t(kBlock)) << std::strerror(errno);
    });
    server->Kill();
    ASSERT_TRUE(server->Start()) << server->why_not();
    on_cpu(allowed[1], [&] {
      errno = 0;
      EXPECT_EQ(::fsync(fd), -1) << "the write the killed server took is reported durable";
      EXPECT_EQ(errno, EIO);
      // Reported once.
      EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
    });
  }
  ::close(fd);
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
}

}  // namespace
}  // namespace bexd::exports::testing
