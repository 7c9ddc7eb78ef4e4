// SPDX-License-Identifier: GPL-2.0-or-later
// A kick fd the frontend hangs up (one end of a pipe or socket pair whose other end it closes)
// stops its ring without a busy loop: the queue thread goes idle, the other rings serve, and a
// new kick fd starts the ring again.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "export/vhost_user/vhost_user_protocol.h"
#include "tests/support/threads.h"
#include "tests/vhost/export_fixture.h"

namespace bexd::test::vhost {
namespace {

namespace proto = exports::vhost;

// How the frontend's end of the kick fd goes away.
enum class HangUp { kPipeWriterClosed, kSocketPeerClosed, kSocketPeerShutsDownWriting };

class KickFdTest : public VhostExportTest, public ::testing::WithParamInterface<HangUp> {};

TEST_P(KickFdTest, HungUpKickFdStopsTheRingWithoutSpinning) {
  StartExport(2);
  std::unique_ptr<Frontend> frontend = ConnectAndInit(Options(2));
  ASSERT_NE(frontend, nullptr);
  std::vector<pid_t> ring1_thread = testing::ThreadIdsNamed("bexd-vhost-q1");
  ASSERT_EQ(ring1_thread.size(), 1u);

  int ends[2];
  if (GetParam() == HangUp::kPipeWriterClosed) {
    ASSERT_EQ(pipe2(ends, O_CLOEXEC), 0);
  } else {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends), 0);
  }
  uint64_t ring = 1;
  absl::StatusOr<uint64_t> verdict = frontend->Send(proto::kSetVringKick, &ring, 8, {ends[0]});
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  ASSERT_EQ(*verdict, 0u);
  close(ends[0]);
  if (GetParam() == HangUp::kSocketPeerShutsDownWriting) {
    ASSERT_EQ(shutdown(ends[1], SHUT_WR), 0);  // the backend reads EOF, nothing hangs up
  } else {
    close(ends[1]);
  }

  // The bug this guards against spins on a CPU (seen getting a quarter of one on a machine with
  // eight times more runnable threads than CPUs); a thread asleep in epoll_wait uses no CPU time
  // at all. The bound leaves room for a busy machine either way.
  const double cpu_before = testing::ThreadCpuSeconds(ring1_thread[0]);
  const auto wall_before = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double cpu_used = testing::ThreadCpuSeconds(ring1_thread[0]) - cpu_before;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
  ASSERT_GE(cpu_before, 0);
  EXPECT_LT(cpu_used, 0.1 * wall) << "ring 1's thread used " << cpu_used << " s of CPU in " << wall
                                  << " s";

  EXPECT_EQ(LookupImage(*frontend, 2), 2u);  // the other request queue serves
  // A new kick fd (QEMU sends it with the rest of the ring's setup) starts ring 1 again.
  ASSERT_TRUE(frontend->StartRing(1).ok());
  EXPECT_EQ(LookupImage(*frontend, 1), 2u);
  if (GetParam() == HangUp::kSocketPeerShutsDownWriting) close(ends[1]);
}

INSTANTIATE_TEST_SUITE_P(HangUps, KickFdTest,
                         ::testing::Values(HangUp::kPipeWriterClosed, HangUp::kSocketPeerClosed,
                                           HangUp::kSocketPeerShutsDownWriting),
                         [](const ::testing::TestParamInfo<HangUp>& info) {
                           switch (info.param) {
                             case HangUp::kPipeWriterClosed:
                               return "PipeWriterClosed";
                             case HangUp::kSocketPeerClosed:
                               return "SocketPeerClosed";
                             case HangUp::kSocketPeerShutsDownWriting:
                               return "SocketPeerShutsDownWriting";
                           }
                           return "";
                         });

}  // namespace
}  // namespace bexd::test::vhost
