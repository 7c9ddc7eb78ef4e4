// SPDX-License-Identifier: GPL-2.0-or-later
// Helpers for the FUSE export tests: disk-backed scratch files, deterministic data patterns,
// exports that always unmount, and a watchdog that ends a hung test instead of letting it hang.
#pragma once

#include <gtest/gtest.h>

#include <sys/types.h>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "block/block_node.h"
#include "block/options.h"
#include "export/export.h"
#include "export/options.h"
#include "tests/support/run_command.h"
#include "tests/support/scratch_dir.h"

namespace bexd::exports::testing {

using bexd::testing::RunCommand;
using bexd::testing::ScratchDir;

// Byte `offset` of the pattern `seed`: every position of every seed differs from its neighbours,
// so misplaced, stale or torn data shows.
uint8_t PatternByte(uint64_t offset, uint32_t seed);
void FillPattern(uint8_t* data, size_t length, uint64_t offset, uint32_t seed);

// Page-aligned memory for O_DIRECT.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t length);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data;
  size_t length;
};

std::vector<uint8_t> ReadWholeFile(const std::string& path);
// Creates `path` holding `size` bytes of the pattern `seed`, written and fsync'ed (so it is
// allocated on disk); returns the bytes.
std::vector<uint8_t> WritePatternFile(const std::string& path, uint64_t size, uint32_t seed);
uint64_t FileSize(const std::string& path);
// Bytes of storage `path` takes (st_blocks), not its length.
uint64_t AllocatedBytes(const std::string& path);
// Runs `command` through the shell; its output. A test failure (with the output) unless it exits
// with 0.
std::string RunOrFail(const std::string& command);
// Whether a FUSE file system is mounted on `path` now.
bool IsFuseMounted(const std::string& path);

std::shared_ptr<block::BlockNode> OpenFileNode(const std::string& filename, bool read_only = false,
                                               bool cache_direct = false,
                                               block::AioMode aio = block::AioMode::kNative);
std::shared_ptr<block::BlockNode> OpenNullNode(uint64_t size);

// fio with four jobs on the export at `mountpoint`, each writing its own `job_bytes` at random
// (4k, libaio, O_DIRECT, queue depth 16) and verifying them with crc32c; checks fio's verdict
// and, unless the export uses passthrough (`through_queues` false), that every block went through
// the export's queues.
inline constexpr uint64_t kFioJobBytes = 16 << 20;
void ExpectFioVerifies(Export* running, const std::string& mountpoint,
                       uint64_t job_bytes = kFioJobBytes, bool through_queues = true);

// The FUSE transport the export tests run over. ctest runs the FUSE export tests twice: over
// /dev/fuse, and with BEXD_TEST_FUSE_IO_URING=1 (test names ending in .io_uring) over FUSE over
// io_uring (io-uring=on); that second run is skipped while the kernel's switch is off.
IoUringMode TestIoUringMode();
// The same as a --export key for bexd command lines: ",io-uring=on" or "".
std::string TestIoUringOption();

// The queues Export::Stats() lists for a FUSE export with `num_queues` /dev/fuse queues: that
// many, or over io_uring one per possible CPU and the one /dev/fuse queue.
size_t ExpectedFuseQueues(uint32_t num_queues);

// Over the transport TestIoUringMode() names.
ExportOptions FuseOptions(const std::string& mountpoint, bool writable, uint32_t num_queues = 2,
                          bool growable = false);

// A bexd process (BEXD_BINARY) with the given arguments; killed on destruction if still running.
// `launcher` runs it (found on PATH, given bexd's command line after its own arguments): e.g.
// nsenter into another network namespace, which execs bexd in place.
class Daemon {
 public:
  explicit Daemon(const std::vector<std::string>& args,
                  const std::vector<std::string>& launcher = {});
  ~Daemon();
  // Waits (up to 20 s) until a FUSE file system is mounted on `path`.
  bool WaitMounted(const std::string& path) const;
  // Sends `signal` and waits up to 30 s for the exit; the wait status, or -1 if it had to be
  // killed.
  int SignalAndWait(int signal);
  // Sends `signal` without waiting.
  void Signal(int signal) const;

 private:
  pid_t pid_ = -1;
};

// Aborts the test program if it is still running `limit` from now: a broken export would
// otherwise leave test threads blocked in FUSE calls forever.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit);
  ~Watchdog();

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

// Base fixture: a scratch directory, a watchdog, and exports that are stopped (and, should Stop
// fail to, lazily unmounted) at the end of every test.
class FuseExportTest : public ::testing::Test {
 protected:
  FuseExportTest() : watchdog_(std::chrono::seconds(240)) {}
  void TearDown() override;

  // Starts an export and remembers it for teardown; fails the test if it does not start.
  Export* Start(const ExportOptions& options, std::shared_ptr<block::BlockNode> node,
                Export::EndedFn on_ended = nullptr);
  // A mountpoint: a regular file holding `original` bytes (to recognise it after unmount).
  std::string MakeMountpoint(const std::string& name = "mnt");

  static constexpr char kOriginalContent[] = "the file under the mount\n";

  ScratchDir scratch_;
  std::vector<std::unique_ptr<Export>> exports_;
  std::vector<std::string> mountpoints_;

 private:
  Watchdog watchdog_;
};

}  // namespace bexd::exports::testing
