// SPDX-License-Identifier: GPL-2.0-or-later
// FUSE passthrough on real mounts: the kernel serves read, write and mmap of an eligible export
// from the image itself (docs/fuse-export.md#passthrough). Data is compared with the image, the
// queues are checked to see none of it, and the exports that must not use passthrough are checked
// to serve through the queues. Tests skip only where the kernel does not offer FUSE_PASSTHROUGH.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "block/raw_node.h"
#include "export/start.h"
#include "tests/export/export_fixture.h"

namespace bexd::exports::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr char kNoKernelSupport[] = "did not offer FUSE_PASSTHROUGH";

ExportOptions PassthroughOptions(const std::string& mountpoint, bool writable, bool growable,
                                 PassthroughMode mode = PassthroughMode::kOn) {
  ExportOptions options = FuseOptions(mountpoint, writable, 2, growable);
  std::get<FuseExportOptions>(options.transport).passthrough = mode;
  return options;
}

struct QueueCounts {
  uint64_t reads = 0, writes = 0;
};
QueueCounts CountQueued(const Export& running) {
  QueueCounts counts;
  for (const auto& queue : running.Stats()) {
    counts.reads += queue.read_requests;
    counts.writes += queue.write_requests;
  }
  return counts;
}

int OpenFds() {
  int count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (struct dirent* entry = ::readdir(dir)) count += entry->d_name[0] != '.';
  ::closedir(dir);
  return count;
}

// Passthrough opens still live: RELEASE reaches bexd asynchronously after the last close(), so
// this waits (up to 5 s) for the count to drop to zero before reading it.
uint32_t LiveOpensAfterRelease(const Export& running) {
  for (int i = 0; i < 500 && running.passthrough_stats()->open_files > 0; ++i) ::usleep(10000);
  return running.passthrough_stats()->open_files;
}

// Reads the whole file at `path` with `flags` in `chunk`-byte reads (aligned for O_DIRECT).
std::vector<uint8_t> ReadThrough(const std::string& path, int flags, size_t chunk) {
  std::vector<uint8_t> bytes;
  const int fd = ::open(path.c_str(), O_RDONLY | flags);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  if (fd < 0) return bytes;
  AlignedBuffer buffer(chunk);
  for (;;) {
    const ssize_t got = ::read(fd, buffer.data, chunk);
    EXPECT_GE(got, 0) << std::strerror(errno);
    if (got <= 0) break;
    bytes.insert(bytes.end(), buffer.data, buffer.data + got);
  }
  ::close(fd);
  return bytes;
}

void WritePattern(const std::string& path, int flags, uint64_t offset, size_t length,
                  uint32_t seed) {
  const int fd = ::open(path.c_str(), O_WRONLY | flags);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  AlignedBuffer buffer(length);
  FillPattern(buffer.data, length, offset, seed);
  EXPECT_EQ(::pwrite(fd, buffer.data, length, static_cast<off_t>(offset)),
            static_cast<ssize_t>(length))
      << std::strerror(errno);
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
}

class PassthroughTest : public FuseExportTest {
 protected:
  // Starts an export that must run with passthrough (passthrough=on); sets `skip_reason_` instead
  // if this kernel does not offer FUSE_PASSTHROUGH.
  Export* StartPassthrough(const ExportOptions& options, std::shared_ptr<block::BlockNode> node) {
    absl::StatusOr<std::unique_ptr<Export>> started = StartExport(options, std::move(node));
    if (!started.ok() && started.status().message().find(kNoKernelSupport) != std::string::npos) {
      skip_reason_ = std::string(started.status().message());
      return nullptr;
    }
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return nullptr;
    exports_.push_back(std::move(*started));
    Export* running = exports_.back().get();
    EXPECT_TRUE(running->passthrough_stats().has_value() && running->passthrough_stats()->active);
    return running;
  }

  std::string skip_reason_;
};

#define START_PASSTHROUGH_OR_SKIP(running, options, node)  \
  Export* running = StartPassthrough(options, node);       \
  if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_; \
  ASSERT_NE(running, nullptr)

// Buffered and O_DIRECT reads of a read-only export return the image, and no READ reaches bexd.
TEST_F(PassthroughTest, ReadOnlyExportReadsTheImageWithoutQueues) {
  const std::string image = scratch_.path() + "/image";
  const std::vector<uint8_t> expected = WritePatternFile(image, 8 * kMiB + 512, 1);
  const std::string mountpoint = MakeMountpoint();
  START_PASSTHROUGH_OR_SKIP(running, PassthroughOptions(mountpoint, false, false),
                            OpenFileNode(image, true));

  EXPECT_EQ(ReadThrough(mountpoint, 0, 4096 + 17), expected);
  EXPECT_EQ(ReadThrough(mountpoint, O_DIRECT, kMiB), expected);
  EXPECT_EQ(CountQueued(*running).reads, 0u);
  const auto stats = running->passthrough_stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->opens, 2u);
  EXPECT_EQ(LiveOpensAfterRelease(*running), 0u);  // both released: the backing id is closed
}

// mmap of a read-only export maps the image; of a growable one, stores reach the image.
TEST_F(PassthroughTest, MmapReadsAndWritesTheImage) {
  const std::string image = scratch_.path() + "/image";
  std::vector<uint8_t> expected = WritePatternFile(image, 4 * kMiB, 2);
  const std::string mountpoint = MakeMountpoint();
  START_PASSTHROUGH_OR_SKIP(running, PassthroughOptions(mountpoint, true, true),
                            OpenFileNode(image));

  const int fd = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  void* map = ::mmap(nullptr, expected.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  auto* bytes = static_cast<uint8_t*>(map);
  EXPECT_EQ(std::memcmp(bytes, expected.data(), expected.size()), 0);
  FillPattern(bytes + kMiB, kMiB, kMiB, 3);
  FillPattern(expected.data() + kMiB, kMiB, kMiB, 3);
  EXPECT_EQ(::msync(map, expected.size(), MS_SYNC), 0) << std::strerror(errno);
  ::munmap(map, expected.size());
  ::close(fd);

  EXPECT_EQ(ReadWholeFile(image), expected);
  EXPECT_EQ(CountQueued(*running).reads + CountQueued(*running).writes, 0u);
}

// A read-only export refuses to open for writing as without passthrough.
TEST_F(PassthroughTest, ReadOnlyExportRefusesWrites) {
  const std::string image = scratch_.path() + "/image";
  const std::vector<uint8_t> expected = WritePatternFile(image, kMiB, 4);
  const std::string mountpoint = MakeMountpoint();
  START_PASSTHROUGH_OR_SKIP(running, PassthroughOptions(mountpoint, false, false),
                            OpenFileNode(image, true));
  for (int flags : {O_WRONLY, O_RDWR, O_WRONLY | O_DIRECT}) {
    errno = 0;
    EXPECT_LT(::open(mountpoint.c_str(), flags), 0);
    EXPECT_EQ(errno, EROFS) << "flags " << flags;
  }
  EXPECT_EQ(ReadWholeFile(image), expected);
  EXPECT_EQ(running->passthrough_stats()->opens, 0u);
}

// Writes past the end of a growable export grow the image (the kernel writes it), and the
// export's size follows; buffered and O_DIRECT writes land byte for byte.
TEST_F(PassthroughTest, GrowableExportGrowsThroughPassthroughWrites) {
  const std::string image = scratch_.path() + "/image";
  std::vector<uint8_t> expected = WritePatternFile(image, 2 * kMiB, 5);
  const std::string mountpoint = MakeMountpoint();
  START_PASSTHROUGH_OR_SKIP(running, PassthroughOptions(mountpoint, true, true),
                            OpenFileNode(image));

  WritePattern(mountpoint, 0, kMiB + 100, 5000, 6);       // inside, unaligned, buffered
  WritePattern(mountpoint, O_DIRECT, 3 * kMiB, kMiB, 7);  // past the end, O_DIRECT
  FillPattern(expected.data() + kMiB + 100, 5000, kMiB + 100, 6);
  expected.resize(4 * kMiB, 0);
  FillPattern(expected.data() + 3 * kMiB, kMiB, 3 * kMiB, 7);

  EXPECT_EQ(FileSize(image), 4 * kMiB);
  EXPECT_EQ(FileSize(mountpoint), 4 * kMiB);
  EXPECT_EQ(ReadWholeFile(image), expected);
  EXPECT_EQ(ReadThrough(mountpoint, O_DIRECT, kMiB), expected);
  EXPECT_EQ(CountQueued(*running).writes, 0u);
  EXPECT_EQ(CountQueued(*running).reads, 0u);
}

// A raw node over the whole file gets passthrough too, and its size follows what the kernel wrote
// past the end; a raw node with an offset is refused under passthrough=on.
TEST_F(PassthroughTest, RawNodeOverTheWholeFile) {
  const std::string image = scratch_.path() + "/image";
  std::vector<uint8_t> expected = WritePatternFile(image, kMiB, 14);
  const std::string mountpoint = MakeMountpoint();
  absl::StatusOr<std::shared_ptr<block::BlockNode>> shifted =
      block::RawNode::Open("raw1", block::RawOptions{.offset = 4096}, false, OpenFileNode(image));
  ASSERT_TRUE(shifted.ok()) << shifted.status();
  absl::StatusOr<std::unique_ptr<Export>> refused =
      StartExport(PassthroughOptions(mountpoint, true, true), *shifted);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("node 'raw1' (raw) is not a host file exported whole"),
            std::string::npos)
      << refused.status();
  shifted->reset();

  absl::StatusOr<std::shared_ptr<block::BlockNode>> raw =
      block::RawNode::Open("raw0", block::RawOptions{}, false, OpenFileNode(image));
  ASSERT_TRUE(raw.ok()) << raw.status();
  START_PASSTHROUGH_OR_SKIP(running, PassthroughOptions(mountpoint, true, true), *raw);
  WritePattern(mountpoint, O_DIRECT, kMiB, kMiB, 15);
  expected.resize(2 * kMiB);
  FillPattern(expected.data() + kMiB, kMiB, kMiB, 15);
  EXPECT_EQ(FileSize(mountpoint), 2 * kMiB);
  EXPECT_EQ((*raw)->size(), 2 * kMiB);  // GETATTR re-read it
  EXPECT_EQ(ReadWholeFile(image), expected);
  EXPECT_EQ(CountQueued(*running).writes, 0u);
}

// What passthrough opens wrote, queue-served opens of the same image read, and the other way
// round: the two paths agree with each other and with the image.
TEST_F(PassthroughTest, PassthroughAndQueueServedExportsAgree) {
  const std::string image = scratch_.path() + "/image";
  std::vector<uint8_t> expected = WritePatternFile(image, 4 * kMiB, 8);
  const std::string mountpoint = MakeMountpoint();
  {
    START_PASSTHROUGH_OR_SKIP(running, PassthroughOptions(mountpoint, true, true),
                              OpenFileNode(image));
    WritePattern(mountpoint, 0, 0, kMiB + 3, 9);
    FillPattern(expected.data(), kMiB + 3, 0, 9);
    EXPECT_EQ(CountQueued(*running).writes, 0u);
    running->Stop();
    exports_.clear();  // drops the node and its image lock
  }
  {
    Export* running = Start(PassthroughOptions(mountpoint, true, true, PassthroughMode::kOff),
                            OpenFileNode(image, false, /*cache_direct=*/true));
    ASSERT_NE(running, nullptr);
    EXPECT_EQ(ReadThrough(mountpoint, 0, 65536), expected);
    WritePattern(mountpoint, O_DIRECT, 2 * kMiB, kMiB, 10);
    FillPattern(expected.data() + 2 * kMiB, kMiB, 2 * kMiB, 10);
    EXPECT_GT(CountQueued(*running).writes, 0u);
    running->Stop();
    exports_.clear();
  }
  START_PASSTHROUGH_OR_SKIP(running, PassthroughOptions(mountpoint, false, false),
                            OpenFileNode(image, true));
  EXPECT_EQ(ReadThrough(mountpoint, O_DIRECT, kMiB), expected);
  EXPECT_EQ(ReadWholeFile(image), expected);
}

// auto gives passthrough to read-only exports only: a writable export's passthrough files would
// keep writing to the image after the export stops (the kernel cannot revoke them), so a
// growable one serves through the queues unless passthrough=on asks otherwise.
TEST_F(PassthroughTest, AutoLeavesAWritableExportOnTheQueues) {
  const std::string image = scratch_.path() + "/image";
  std::vector<uint8_t> expected = WritePatternFile(image, 2 * kMiB, 13);
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(PassthroughOptions(mountpoint, true, true, PassthroughMode::kAuto),
                          OpenFileNode(image));
  ASSERT_NE(running, nullptr);
  ASSERT_TRUE(running->passthrough_stats().has_value());
  EXPECT_FALSE(running->passthrough_stats()->active);
  EXPECT_EQ(ReadThrough(mountpoint, 0, 65536), expected);
  EXPECT_GT(CountQueued(*running).reads, 0u);
}

// A writable export that may not grow serves through the queues under auto (a passthrough write
// past the end would grow the image): such a write fails with EIO and the image keeps its size.
TEST_F(PassthroughTest, NonGrowableWritableExportUsesTheQueuesAndDoesNotGrow) {
  const std::string image = scratch_.path() + "/image";
  std::vector<uint8_t> expected = WritePatternFile(image, 2 * kMiB, 11);
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(PassthroughOptions(mountpoint, true, false, PassthroughMode::kAuto),
                          OpenFileNode(image));
  ASSERT_NE(running, nullptr);
  ASSERT_TRUE(running->passthrough_stats().has_value());
  EXPECT_FALSE(running->passthrough_stats()->active);

  const int fd = ::open(mountpoint.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::vector<uint8_t> block(4096);
  FillPattern(block.data(), block.size(), kMiB, 12);
  EXPECT_EQ(::pwrite(fd, block.data(), block.size(), kMiB), 4096) << std::strerror(errno);
  errno = 0;
  EXPECT_EQ(::pwrite(fd, block.data(), block.size(), 2 * kMiB), -1);
  EXPECT_EQ(errno, EIO);
  ::close(fd);
  std::memcpy(expected.data() + kMiB, block.data(), block.size());

  EXPECT_EQ(FileSize(image), 2 * kMiB);
  EXPECT_EQ(ReadWholeFile(image), expected);
  EXPECT_GT(CountQueued(*running).writes, 0u);
  EXPECT_EQ(running->passthrough_stats()->opens, 0u);
}

// passthrough=on where the node is not a host file exported whole fails to start with one line.
TEST_F(PassthroughTest, OnIsRefusedForANodeThatIsNoHostFile) {
  const std::string mountpoint = MakeMountpoint();
  absl::StatusOr<std::unique_ptr<Export>> started =
      StartExport(PassthroughOptions(mountpoint, false, false), OpenNullNode(kMiB));
  ASSERT_FALSE(started.ok());
  const std::string message(started.status().message());
  EXPECT_NE(message.find("export 'export0': passthrough=on is not possible"), std::string::npos)
      << message;
  EXPECT_NE(message.find("null-co"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_FALSE(IsFuseMounted(mountpoint));

  // auto runs such an export through the queues.
  Export* running = Start(PassthroughOptions(mountpoint, false, false, PassthroughMode::kAuto),
                          OpenNullNode(kMiB));
  ASSERT_NE(running, nullptr);
  EXPECT_FALSE(running->passthrough_stats()->active);
  EXPECT_EQ(ReadThrough(mountpoint, 0, 65536), std::vector<uint8_t>(kMiB, 0));
  EXPECT_GT(CountQueued(*running).reads, 0u);
}

// The same refusal from the command line: bexd exits non-zero with one line naming the export.
TEST_F(PassthroughTest, CommandLineRefusesOnForANullNode) {
  const std::string mountpoint = MakeMountpoint();
  int status = 0;
  const std::string output =
      RunCommand(std::string(BEXD_BINARY) +
                     " --blockdev null-co,node-name=n0,size=1M --export fuse,id=e0,node-name=n0,"
                     "mountpoint=" +
                     mountpoint + ",passthrough=on 2>&1",
                 &status);
  EXPECT_NE(status, 0) << output;
  EXPECT_NE(output.find("export 'e0': passthrough=on is not possible: node 'n0' (null-co)"),
            std::string::npos)
      << output;
  EXPECT_FALSE(IsFuseMounted(mountpoint));
}

// fio with four jobs verifying crc32c on a growable passthrough export; none of its I/O reaches
// the queues.
TEST_F(PassthroughTest, FioFourJobsVerifyCrc32c) {
  const std::string image = scratch_.CreateFile("image", 4 * kFioJobBytes);
  const std::string mountpoint = MakeMountpoint();
  START_PASSTHROUGH_OR_SKIP(running, PassthroughOptions(mountpoint, true, true),
                            OpenFileNode(image));
  ExpectFioVerifies(running, mountpoint, kFioJobBytes, /*through_queues=*/false);
  EXPECT_EQ(CountQueued(*running).writes + CountQueued(*running).reads, 0u);
  EXPECT_GE(running->passthrough_stats()->opens, 4u);
  EXPECT_EQ(LiveOpensAfterRelease(*running), 0u);
}

// Stop() while files are open through passthrough closes the backing id and the reopened image
// descriptor: the process holds no more descriptors than before the export.
TEST_F(PassthroughTest, StopWithOpenFilesLeaksNoDescriptor) {
  const std::string image = scratch_.path() + "/image";
  WritePatternFile(image, kMiB, 13);
  const std::string mountpoint = MakeMountpoint();
  std::shared_ptr<block::BlockNode> node = OpenFileNode(image, true);
  const int before = OpenFds();
  {
    START_PASSTHROUGH_OR_SKIP(running, PassthroughOptions(mountpoint, false, false), node);
    const int fd = ::open(mountpoint.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(running->passthrough_stats()->open_files, 1u);
    running->Stop();
    EXPECT_FALSE(IsFuseMounted(mountpoint));
    ::close(fd);
    exports_.clear();
  }
  EXPECT_EQ(OpenFds(), before);
}

// SIGTERM while writers with fsync run through passthrough: bexd drains, flushes and unmounts,
// exits 0, and every block holds what was fsync'ed to it last or the one write after that.
TEST_F(PassthroughTest, SigtermUnderPassthroughLoadUnmountsCleanly) {
  constexpr size_t kBlock = 64 << 10;
  constexpr uint64_t kBlocks = 16;
  constexpr int kWriters = 3;
  const std::string image = scratch_.CreateFile("image", kWriters * kBlocks * kBlock);
  const std::string mountpoint = MakeMountpoint();
  {
    // Only to skip where the kernel lacks passthrough: bexd below would fail to start.
    START_PASSTHROUGH_OR_SKIP(probe, PassthroughOptions(mountpoint, false, false),
                              OpenFileNode(image, true));
    probe->Stop();
    exports_.clear();
  }
  Daemon daemon(
      {"--blockdev", "file,node-name=f0,filename=" + image, "--export",
       "fuse,id=e0,node-name=f0,writable=on,growable=on,passthrough=on,mountpoint=" + mountpoint});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));

  struct Writer {
    std::vector<uint64_t> synced = std::vector<uint64_t>(kBlocks, 0);
    uint64_t last_block = 0, last_generation = 0;
    std::atomic<uint64_t> fsyncs{0};
    std::atomic<bool> ended{false};
  };
  std::vector<Writer> writers(kWriters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      Writer& writer = writers[i];
      const int fd = ::open(mountpoint.c_str(), O_RDWR | O_DIRECT);
      if (fd >= 0) {
        AlignedBuffer buffer(kBlock);
        for (uint64_t generation = 1;; ++generation) {
          const uint64_t block = generation % kBlocks;
          const uint64_t offset = (i * kBlocks + block) * kBlock;
          FillPattern(buffer.data, kBlock, offset, static_cast<uint32_t>(i << 24 | generation));
          writer.last_block = block;
          writer.last_generation = generation;
          if (::pwrite(fd, buffer.data, kBlock, static_cast<off_t>(offset)) !=
                  static_cast<ssize_t>(kBlock) ||
              ::fsync(fd) != 0) {
            break;
          }
          writer.synced[block] = generation;
          writer.fsyncs.fetch_add(1);
        }
        ::close(fd);
      }
      writer.ended = true;
    });
  }
  for (const Writer& writer : writers) {
    while (writer.fsyncs.load() < 2 * kBlocks && !writer.ended.load()) ::usleep(1000);
  }
  const int status = daemon.SignalAndWait(SIGTERM);
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(IsFuseMounted(mountpoint));

  const std::vector<uint8_t> bytes = ReadWholeFile(image);
  ASSERT_EQ(bytes.size(), kWriters * kBlocks * kBlock);
  std::vector<uint8_t> block_bytes(kBlock);
  for (int i = 0; i < kWriters; ++i) {
    EXPECT_GE(writers[i].fsyncs.load(), 2 * kBlocks) << "writer " << i;
    for (uint64_t block = 0; block < kBlocks; ++block) {
      const uint64_t offset = (i * kBlocks + block) * kBlock;
      bool matches = false;
      std::vector<uint64_t> candidates = {writers[i].synced[block]};
      if (writers[i].last_block == block) candidates.push_back(writers[i].last_generation);
      for (uint64_t generation : candidates) {
        FillPattern(block_bytes.data(), kBlock, offset,
                    static_cast<uint32_t>(i << 24 | generation));
        matches |= std::memcmp(bytes.data() + offset, block_bytes.data(), kBlock) == 0;
      }
      EXPECT_TRUE(matches) << "writer " << i << " block " << block;
    }
  }
}

}  // namespace
}  // namespace bexd::exports::testing
