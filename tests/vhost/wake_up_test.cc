// SPDX-License-Identifier: GPL-2.0-or-later
// A queue thread sleeps between requests and must wake for every kick and every completion. It
// watches an eventfd kick fd and the file queue's completion eventfd edge-triggered and never
// reads them, so a request that arrives or completes just before the thread re-arms (the ring's
// kick request, the epoll wait) is what could be lost. Thousands of requests at queue depth 1,
// with pauses of varying length between them, put those moments everywhere; a lost wake-up shows
// as a request that never completes (the frontend's bounded wait fails). Any other kick fd must
// still be read: a socket whose receive buffer is full of kicks refuses more, and a refused write
// wakes nobody (a full pipe still wakes an epoll reader on every write attempt on Linux 6.x, so
// the test uses a socket pair). The test first kicks the empty ring more often than that buffer
// holds. With polling, the thread spins with kicks off before it sleeps (poll-max-ns): a chain the
// frontend makes available without kicking while it spins, or just as it stops spinning, must not
// be lost either; a 100 µs window puts the pauses (0-200 µs) on both sides of it.
#include <linux/fuse.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <tuple>

#include "tests/vhost/export_fixture.h"

namespace bexd::test::vhost {
namespace {

enum class KickFd { kEventFd, kSocket };
enum class Polling { kOff, kOn };

class WakeUpTest : public VhostExportTest,
                   public ::testing::WithParamInterface<std::tuple<KickFd, bool, Polling>> {};

TEST_P(WakeUpTest, EveryRequestAtQueueDepthOneCompletes) {
  StartExport(1, /*writable=*/true, std::get<2>(GetParam()) == Polling::kOn ? 100000 : 0);
  FrontendOptions options = Options();
  options.kick_socket = std::get<0>(GetParam()) == KickFd::kSocket;
  options.event_idx = std::get<1>(GetParam());
  options.timeout = std::chrono::milliseconds(5000);
  std::unique_ptr<Frontend> frontend = ConnectAndInit(options);
  ASSERT_NE(frontend, nullptr);
  const uint64_t node = LookupImage(*frontend);
  const uint64_t fh = OpenImage(*frontend, node);

  // More 8-byte kicks than a socket's receive buffer holds (each one costs a few hundred bytes of
  // it) or a pipe's 64 KiB; the ring is empty, so each finds nothing to do.
  for (int i = 0; i < 10000; ++i) frontend->Kick(1);

  constexpr int kRequests = 9000;
  constexpr uint32_t kSize = 4096;
  std::minstd_rand random(15);
  for (int i = 0; i < kRequests; ++i) {
    // Mostly back to back (the kick lands while the thread finishes the last request), sometimes
    // after the thread has gone to sleep.
    const int pause_us = i % 4 == 0 ? static_cast<int>(random() % 200) : 0;
    if (pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    struct fuse_read_in in = {};
    in.fh = fh;
    in.offset = (random() % (kImageSize / kSize)) * kSize;
    in.size = kSize;
    absl::StatusOr<FuseReply> reply = frontend->Fuse(1, FUSE_READ, node, &in, sizeof(in), nullptr,
                                                     0, sizeof(fuse_out_header) + kSize);
    ASSERT_TRUE(reply.ok()) << "request " << i << ": " << reply.status();
    ASSERT_EQ(reply->header.error, 0) << "request " << i;
    ASSERT_EQ(reply->payload.size(), kSize);
    ASSERT_EQ(std::memcmp(reply->payload.data(), &pattern_[in.offset], kSize), 0)
        << "request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    KickFds, WakeUpTest,
    ::testing::Combine(::testing::Values(KickFd::kEventFd, KickFd::kSocket), ::testing::Bool(),
                       ::testing::Values(Polling::kOff, Polling::kOn)),
    [](const ::testing::TestParamInfo<std::tuple<KickFd, bool, Polling>>& info) {
      return std::string(std::get<0>(info.param) == KickFd::kSocket ? "Socket" : "EventFd") +
             (std::get<1>(info.param) ? "EventIdx" : "NoEventIdx") +
             (std::get<2>(info.param) == Polling::kOn ? "Polling" : "Sleeping");
    });

}  // namespace
}  // namespace bexd::test::vhost
