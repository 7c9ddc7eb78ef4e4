// SPDX-License-Identifier: GPL-2.0-or-later
// Stop() under load: writers with fsync keep going until the export goes away; afterwards the
// mount is gone and every block holds what was last fsync'ed to it (or the one write after that).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/export/export_fixture.h"

namespace bexd::exports::testing {
namespace {

constexpr size_t kBlock = 64 << 10;
constexpr uint64_t kBlocksPerWriter = 32;
constexpr int kWriters = 3;

uint32_t SeedOf(int writer, uint64_t generation) {
  return static_cast<uint32_t>(writer) << 24 | static_cast<uint32_t>(generation);
}

struct Writer {
  // Per block: the generation last made durable with fsync (0: never written).
  std::vector<uint64_t> synced = std::vector<uint64_t>(kBlocksPerWriter, 0);
  uint64_t last_block = 0, last_generation = 0;  // the last write attempted
  std::atomic<uint64_t> fsyncs{0};
  std::atomic<int> error{0};  // the errno that ended the writer
};

void WriteUntilFailure(const std::string& path, int index, Writer* writer) {
  int fd = ::open(path.c_str(), O_RDWR | O_DIRECT);
  if (fd < 0) {
    writer->error = errno;
    return;
  }
  AlignedBuffer buffer(kBlock);
  for (uint64_t generation = 1;; ++generation) {
    const uint64_t block = generation % kBlocksPerWriter;
    const uint64_t offset = (index * kBlocksPerWriter + block) * kBlock;
    FillPattern(buffer.data, kBlock, offset, SeedOf(index, generation));
    writer->last_block = block;
    writer->last_generation = generation;
    if (::pwrite(fd, buffer.data, kBlock, static_cast<off_t>(offset)) !=
            static_cast<ssize_t>(kBlock) ||
        ::fsync(fd) != 0) {
      writer->error = errno;
      break;
    }
    writer->synced[block] = generation;
    writer->fsyncs.fetch_add(1, std::memory_order_relaxed);
  }
  ::close(fd);
}

// Starts the writers and returns once each has fsync'ed every one of its blocks twice (bounded by
// the watchdog).
std::vector<std::thread> StartWriters(const std::string& path, std::vector<Writer>* writers) {
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back(WriteUntilFailure, path, i, &(*writers)[i]);
  }
  for (const Writer& writer : *writers) {
    while (writer.fsyncs.load() < 2 * kBlocksPerWriter && writer.error.load() == 0) {
      ::usleep(1000);
    }
  }
  return threads;
}

void ExpectFsyncedDataIn(const std::string& image, const std::vector<Writer>& writers) {
  const std::vector<uint8_t> backing = ReadWholeFile(image);
  ASSERT_EQ(backing.size(), kWriters * kBlocksPerWriter * kBlock);
  for (int i = 0; i < kWriters; ++i) {
    const Writer& writer = writers[i];
    EXPECT_NE(writer.error.load(), 0) << "writer " << i << " never saw the export go away";
    EXPECT_GE(writer.fsyncs.load(), 2 * kBlocksPerWriter) << "writer " << i;
    for (uint64_t block = 0; block < kBlocksPerWriter; ++block) {
      const uint64_t offset = (i * kBlocksPerWriter + block) * kBlock;
      auto holds = [&](uint64_t generation) {
        for (size_t b = 0; b < kBlock; ++b) {
          if (backing[offset + b] != PatternByte(offset + b, SeedOf(i, generation))) return false;
        }
        return true;
      };
      // The write after the last fsync may or may not have been served before the stop.
      const bool ok = holds(writer.synced[block]) ||
                      (block == writer.last_block && holds(writer.last_generation));
      EXPECT_TRUE(ok) << "writer " << i << " block " << block << " lost fsync'ed generation "
                      << writer.synced[block];
    }
  }
}

using StopTest = FuseExportTest;

TEST_F(StopTest, StopUnderLoadUnmountsAndKeepsFsyncedData) {
  const std::string image = scratch_.CreateFile("image", kWriters * kBlocksPerWriter * kBlock);
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(FuseOptions(mountpoint, true, 2), OpenFileNode(image, false, true));
  ASSERT_NE(running, nullptr);

  std::vector<Writer> writers(kWriters);
  std::vector<std::thread> threads = StartWriters(mountpoint, &writers);
  running->Stop();
  for (auto& thread : threads) thread.join();

  EXPECT_FALSE(IsFuseMounted(mountpoint));
  EXPECT_EQ(FileSize(mountpoint), sizeof(kOriginalContent) - 1);
  ExpectFsyncedDataIn(image, writers);
}

// The daemon itself: SIGTERM under the same load stops the export the same way and exits 0.
TEST_F(StopTest, SigtermUnderLoadStopsTheDaemonCleanly) {
  const std::string image = scratch_.CreateFile("image", kWriters * kBlocksPerWriter * kBlock);
  const std::string mountpoint = MakeMountpoint();
  const std::string blockdev = "driver=file,node-name=disk0,cache.direct=on,filename=" + image;
  const std::string fuse_export =
      "type=fuse,id=export0,node-name=disk0,writable=on,"
      "num-queues=2,mountpoint=" +
      mountpoint + TestIoUringOption();
  Daemon daemon({"--blockdev", blockdev, "--export", fuse_export});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint)) << "bexd did not mount " << mountpoint;

  std::vector<Writer> writers(kWriters);
  std::vector<std::thread> threads = StartWriters(mountpoint, &writers);
  const int status = daemon.SignalAndWait(SIGTERM);
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "wait status " << status << " (-1: still running 30 s after SIGTERM)";

  EXPECT_FALSE(IsFuseMounted(mountpoint));
  EXPECT_EQ(FileSize(mountpoint), sizeof(kOriginalContent) - 1);
  ExpectFsyncedDataIn(image, writers);
}

}  // namespace
}  // namespace bexd::exports::testing
