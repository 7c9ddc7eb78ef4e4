// SPDX-License-Identifier: GPL-2.0-or-later
// The queue-cpus option: CPU lists parse strictly, and FUSE queue threads run where it says.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "export/queue/queue_cpus.h"
#include "export/start.h"
#include "tests/export/export_fixture.h"
#include "tests/support/threads.h"

namespace bexd::exports::testing {
namespace {

using bexd::testing::ForbiddenCpu;
using bexd::testing::ProcessCpus;
using bexd::testing::ThreadCpus;
using bexd::testing::ThreadIdsNamed;

TEST(CpuListTest, ParsesNumbersAndRanges) {
  struct Case {
    const char* text;
    std::vector<int> cpus;
  };
  for (const Case& c : {Case{"0", {0}}, Case{"0-3,8", {0, 1, 2, 3, 8}}, Case{"3,1,1-2", {1, 2, 3}},
                        Case{"5-5", {5}}, Case{"1023", {1023}}}) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(c.text);
    ASSERT_TRUE(cpus.ok()) << c.text << ": " << cpus.status();
    EXPECT_EQ(*cpus, c.cpus) << c.text;
  }
}

TEST(CpuListTest, RefusesWhatIsNotACpuList) {
  for (const char* text : {"", "a", "1-", "-1", "1,,2", "1,", ",1", "1 ", "0x1", "1-2-3", "1024"}) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(text);
    ASSERT_FALSE(cpus.ok()) << "'" << text << "' parsed";
    EXPECT_EQ(cpus.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(cpus.status().message().find(std::string("'") + text + "' is not a CPU list"),
              std::string::npos)
        << cpus.status();
  }
  EXPECT_EQ(ParseCpuList("3-1").status().message(),
            "'3-1' is not a CPU list: the range 3-1 runs backwards");
}

TEST(CpuListTest, FormatsRuns) {
  EXPECT_EQ(FormatCpuList({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(FormatCpuList({4}), "4");
  EXPECT_EQ(FormatCpuList({}), "");
}

TEST(CpuListTest, ChecksCpusAgainstTheAffinityMask) {
  const std::vector<int> allowed = ProcessCpus();
  ASSERT_FALSE(allowed.empty());
  EXPECT_TRUE(CheckQueueCpus(allowed).ok());
  const int forbidden = ForbiddenCpu();
  absl::Status status = CheckQueueCpus({allowed.front(), forbidden});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "queue-cpus: CPU " + std::to_string(forbidden) +
                " is not one bexd may run on (allowed: " + FormatCpuList(allowed) + ")");
}

class QueueCpusTest : public FuseExportTest {};

// Two queues on one CPU: both threads are pinned there, and data still goes through.
TEST_F(QueueCpusTest, PinsEveryQueueThreadAndServes) {
  const int cpu = ProcessCpus().back();
  const std::string image = scratch_.CreateFile("image", 1 << 20);
  const std::string mountpoint = MakeMountpoint();
  ExportOptions options = FuseOptions(mountpoint, true, 2);
  std::get<FuseExportOptions>(options.transport).queue_cpus = {cpu};
  ASSERT_NE(Start(options, OpenFileNode(image)), nullptr);

  const std::vector<pid_t> threads = ThreadIdsNamed("bexd-fuse-q");
  ASSERT_EQ(threads.size(), 2u);
  for (pid_t tid : threads) EXPECT_EQ(ThreadCpus(tid), std::vector<int>{cpu}) << "thread " << tid;

  int fd = ::open(mountpoint.c_str(), O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  AlignedBuffer written(64 << 10), read_back(64 << 10);
  FillPattern(written.data, written.length, 8192, 11);
  ASSERT_EQ(::pwrite(fd, written.data, written.length, 8192), static_cast<ssize_t>(written.length));
  ASSERT_EQ(::pread(fd, read_back.data, read_back.length, 8192),
            static_cast<ssize_t>(read_back.length));
  ::close(fd);
  EXPECT_EQ(std::memcmp(written.data, read_back.data, written.length), 0);
}

// Without num-queues, the list sets the queue count: one queue per listed CPU, in order.
TEST_F(QueueCpusTest, OneQueuePerListedCpuByDefault) {
  const std::vector<int> cpus = ProcessCpus();
  const std::string mountpoint = MakeMountpoint();
  ExportOptions options = FuseOptions(mountpoint, false, 0);
  std::get<FuseExportOptions>(options.transport).queue_cpus = cpus;
  Export* running = Start(options, OpenNullNode(1 << 20));
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->Stats().size(), std::min<size_t>(cpus.size(), 256));
  for (size_t i = 0; i < cpus.size() && i < 8; ++i) {
    const std::vector<pid_t> thread = ThreadIdsNamed("bexd-fuse-q" + std::to_string(i));
    ASSERT_EQ(thread.size(), 1u) << "queue " << i;
    EXPECT_EQ(ThreadCpus(thread[0]), std::vector<int>{cpus[i]}) << "queue " << i;
  }
}

// A CPU the daemon may not use is refused before anything is mounted.
TEST_F(QueueCpusTest, RefusesACpuOutsideTheAffinityMask) {
  const int forbidden = ForbiddenCpu();
  const std::string mountpoint = MakeMountpoint();
  ExportOptions options = FuseOptions(mountpoint, false, 2);
  std::get<FuseExportOptions>(options.transport).queue_cpus = {forbidden};
  absl::StatusOr<std::unique_ptr<Export>> started = StartExport(options, OpenNullNode(1 << 20));
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(started.status().message().find("queue-cpus: CPU " + std::to_string(forbidden) +
                                            " is not one bexd may run on"),
            std::string::npos)
      << started.status();
  EXPECT_FALSE(IsFuseMounted(mountpoint));
  EXPECT_TRUE(ThreadIdsNamed("bexd-fuse-q").empty());
}

}  // namespace
}  // namespace bexd::exports::testing
