// SPDX-License-Identifier: GPL-2.0-or-later
// A process killed (SIGKILL) while it writes through the qcow2 driver leaves an image that
// `qemu-img check` finds free of corruption (leaked clusters are allowed), holding every write that
// was flushed (or written with FUA) before the kill.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "block/qcow2/sync_io.h"
#include "tests/block/file_fixture.h"
#include "tests/block/qcow2_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::RunCommand;
using testing::ScratchDir;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kSlot = 65536;
constexpr uint64_t kSlots = 512;

// A write the child made durable, as it records it in the log.
struct LoggedWrite {
  uint64_t offset;
  uint64_t length;
  uint32_t seed;
  uint32_t pad;
};

LoggedWrite PlanWrite(uint32_t i) {
  // Every write in a slot of its own (so none overwrites another), starting and ending inside a
  // cluster so that most need copy-on-write.
  uint64_t slot = (uint64_t{i} * 197) % kSlots;
  uint64_t start = (uint64_t{i} * 7919) % (kSlot / 2);
  uint64_t length = 1 + (uint64_t{i} * 104729) % (kSlot / 2);
  return LoggedWrite{slot * kSlot + start, length, i, 0};
}

void AppendLog(int fd, const std::vector<LoggedWrite>& writes) {
  if (writes.empty()) return;
  size_t bytes = writes.size() * sizeof(LoggedWrite);
  if (write(fd, writes.data(), bytes) != static_cast<ssize_t>(bytes) || fdatasync(fd) != 0) {
    _exit(3);
  }
}

// The child: writes, flushes every few writes, logs what each flush made durable, until killed.
[[noreturn]] void WriteUntilKilled(const std::string& image, const std::string& log, bool lazy) {
  testing::ImageOptions options;
  options.qcow2.lazy_refcounts = lazy;
  auto node = testing::OpenImage(image, false, options);
  if (!node.ok()) _exit(1);
  auto io = qcow2::SyncIo::Create(**node);
  int fd = open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (!io.ok() || fd < 0) _exit(2);
  std::vector<LoggedWrite> pending;
  for (uint32_t i = 0; i < kSlots; ++i) {
    LoggedWrite planned = PlanWrite(i);
    std::vector<unsigned char> data = testing::Pattern(planned.length, planned.seed);
    if ((*io)->Write(planned.offset, data.data(), planned.length) != 0) _exit(4);
    pending.push_back(planned);
    if (i % 8 == 7) {
      if ((*io)->Flush() != 0) _exit(5);
      AppendLog(fd, pending);
      pending.clear();
    }
  }
  // Out of slots before the kill: wait for it.
  for (;;) pause();
}

std::vector<LoggedWrite> ReadLog(const std::string& log) {
  std::vector<unsigned char> bytes = testing::ReadFile(log, 0, testing::FileSize(log));
  std::vector<LoggedWrite> writes(bytes.size() / sizeof(LoggedWrite));
  std::memcpy(writes.data(), bytes.data(), writes.size() * sizeof(LoggedWrite));
  return writes;
}

struct CrashCase {
  bool lazy_refcounts;
  bool backing;
};

class Qcow2CrashTest : public ::testing::TestWithParam<CrashCase> {
 protected:
  ScratchDir dir_{"qcow2"};
};

TEST_P(Qcow2CrashTest, KilledWriterLeavesAConsistentImageWithEveryFlushedWrite) {
  const uint64_t size = kSlots * kSlot;
  std::string image = dir_.path() + "/image.qcow2";
  std::string log = dir_.CreateFile("flushed.log", 0);
  std::string options = GetParam().lazy_refcounts ? "-o lazy_refcounts=on" : "";
  if (GetParam().backing) {
    testing::WriteFile(dir_.CreateFile("base.raw", size), testing::Pattern(size, 77), 0);
    options += " -b base.raw -F raw";
  }
  RunCommand("cd " + dir_.path() + " && qemu-img create -f qcow2 " + options + " image.qcow2 " +
             std::to_string(size) + " >/dev/null");
  std::vector<unsigned char> before = testing::QemuContents(image, dir_);

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) WriteUntilKilled(image, log, GetParam().lazy_refcounts);
  // Kill it once a good part of the writes is durable, in the middle of more.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (testing::FileSize(log) < 24 * 8 * sizeof(LoggedWrite) &&
         std::chrono::steady_clock::now() < deadline) {
    int status;
    ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "the writer exited with " << status;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited with " << status;
  std::vector<LoggedWrite> flushed = ReadLog(log);
  ASSERT_GE(flushed.size(), 24u * 8);

  if (GetParam().lazy_refcounts) {
    // Refcounts may lag behind: opening the image writable repairs them, as QEMU does.
    EXPECT_NE(RunCommand("qemu-img info " + image).find("lazy refcounts: true"), std::string::npos);
    auto node = testing::OpenImage(image, false);
    ASSERT_TRUE(node.ok()) << node.status();
  }
  testing::CheckResult check = testing::QemuCheck(image);
  EXPECT_EQ(check.corruptions, 0u) << check.output;
  if (GetParam().lazy_refcounts) {
    EXPECT_EQ(check.leaks, 0u) << check.output;
  }

  std::vector<unsigned char> contents = testing::QemuContents(image, dir_);
  ASSERT_EQ(contents.size(), size);
  for (const LoggedWrite& write : flushed) {
    std::vector<unsigned char> expected = testing::Pattern(write.length, write.seed);
    ASSERT_EQ(std::memcmp(contents.data() + write.offset, expected.data(), write.length), 0)
        << "flushed write " << write.seed << " at " << write.offset << " is missing";
  }
  // What nobody wrote is as it was.
  std::vector<bool> written(size, false);
  for (uint32_t i = 0; i < kSlots; ++i) {
    LoggedWrite planned = PlanWrite(i);
    std::fill(written.begin() + planned.offset, written.begin() + planned.offset + planned.length,
              true);
  }
  for (uint64_t i = 0; i < size; ++i) {
    if (!written[i]) {
      ASSERT_EQ(contents[i], before[i]) << "untouched byte " << i << " changed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Qcow2CrashTest,
                         ::testing::Values(CrashCase{false, false}, CrashCase{false, true},
                                           CrashCase{true, false}, CrashCase{true, true}),
                         [](const ::testing::TestParamInfo<CrashCase>& info) {
                           return std::string(info.param.lazy_refcounts ? "Lazy" : "Eager") +
                                  (info.param.backing ? "Backed" : "");
                         });

}  // namespace
}  // namespace bexd::block
