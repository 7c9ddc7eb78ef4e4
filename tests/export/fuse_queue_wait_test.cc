// SPDX-License-Identifier: GPL-2.0-or-later
// How idle FUSE queue threads wait: in a blocking read of their own /dev/fuse clone. They must
// take turns at queue depth 1, ignore a stray wake-up signal, and still stop when asked.
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/export/export_fixture.h"
#include "tests/support/threads.h"

namespace bexd::exports::testing {
namespace {

class QueueWaitTest : public FuseExportTest {};

std::vector<pid_t> QueueThreadIds() { return bexd::testing::ThreadIdsNamed("bexd-fuse-q"); }

// Whether thread `tid` of this process waits in read(2) (/proc/.../syscall starts with its
// number).
bool WaitsInRead(pid_t tid) {
  std::ifstream syscall_file("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long number = -1;
  return static_cast<bool>(syscall_file >> number) && number == SYS_read;
}

// Until every queue thread waits in its read (at most 5 s): on a busy machine a thread may still
// be on its way there, and the kernel can only hand requests to the readers it has.
bool AllQueuesWaitInRead(size_t queues) {
  for (int tries = 0; tries < 500; ++tries) {
    const std::vector<pid_t> threads = QueueThreadIds();
    if (threads.size() == queues && std::all_of(threads.begin(), threads.end(), WaitsInRead)) {
      return true;
    }
    ::usleep(10000);
  }
  return false;
}

// One request at a time from one thread: with every queue idle in its read, the kernel hands each
// request to the reader that has waited longest, so no queue may end up with nearly all of them
// (with epoll-only waiting, queue 0 took 97 %).
TEST_F(QueueWaitTest, RequestsAtQueueDepthOneAreSpreadOverIdleQueues) {
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(FuseOptions(mountpoint, false, 4), OpenNullNode(8 << 20));
  ASSERT_NE(running, nullptr);
  int fd = ::open(mountpoint.c_str(), O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_TRUE(AllQueuesWaitInRead(4)) << "the queue threads never waited in their reads";
  AlignedBuffer buffer(4096);
  constexpr int kReads = 400;
  for (int i = 0; i < kReads; ++i) {
    ASSERT_EQ(::pread(fd, buffer.data, 4096, (i % 64) * 4096), 4096) << std::strerror(errno);
  }
  ::close(fd);

  std::vector<fuse::QueueStatsSnapshot> stats = running->Stats();
  ASSERT_EQ(stats.size(), 4u);
  uint64_t total = 0, busiest = 0, queues_used = 0;
  for (const auto& queue : stats) {
    total += queue.read_requests;
    busiest = std::max(busiest, queue.read_requests);
    if (queue.read_requests > 0) ++queues_used;
  }
  EXPECT_EQ(total, uint64_t{kReads});
  EXPECT_GE(queues_used, 2u);
  EXPECT_LT(busiest, total * 3 / 4) << "one queue served " << busiest << " of " << total;
}

// SIGUSR2 is how a stop interrupts the blocking read; one that arrives without a stop must only
// make the thread read again.
TEST_F(QueueWaitTest, StraySignalLeavesIdleQueuesServing) {
  const std::string image = scratch_.CreateFile("image", 1 << 20);
  const std::string mountpoint = MakeMountpoint();
  ASSERT_NE(Start(FuseOptions(mountpoint, true, 2), OpenFileNode(image)), nullptr);
  const std::vector<pid_t> threads = QueueThreadIds();
  ASSERT_EQ(threads.size(), 2u);
  for (int round = 0; round < 3; ++round) {
    for (pid_t tid : threads) ASSERT_EQ(::syscall(SYS_tgkill, ::getpid(), tid, SIGUSR2), 0);
    ::usleep(20000);  // let the signals land while the threads wait
  }

  int fd = ::open(mountpoint.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::vector<uint8_t> written(64 << 10), read_back(64 << 10);
  FillPattern(written.data(), written.size(), 4096, 7);
  ASSERT_EQ(::pwrite(fd, written.data(), written.size(), 4096),
            static_cast<ssize_t>(written.size()));
  ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ASSERT_EQ(::pread(fd, read_back.data(), read_back.size(), 4096),
            static_cast<ssize_t>(read_back.size()));
  ::close(fd);
  EXPECT_TRUE(read_back == written);
  EXPECT_TRUE(IsFuseMounted(mountpoint));
  EXPECT_EQ(QueueThreadIds().size(), 2u);
}

// Every queue waits in its blocking read; Stop() must wake them all and unmount.
TEST_F(QueueWaitTest, StopEndsQueuesWaitingInTheirRead) {
  for (uint32_t queues : {1u, 4u}) {
    const std::string mountpoint = MakeMountpoint("mnt" + std::to_string(queues));
    Export* running = Start(FuseOptions(mountpoint, false, queues), OpenNullNode(1 << 20));
    ASSERT_NE(running, nullptr);
    ::usleep(50000);  // the threads reach their read
    running->Stop();
    EXPECT_FALSE(IsFuseMounted(mountpoint));
    EXPECT_TRUE(QueueThreadIds().empty());
  }
}

}  // namespace
}  // namespace bexd::exports::testing
