// SPDX-License-Identifier: GPL-2.0-or-later
// A frontend shares the open file description of the call and error eventfds it passes, so it
// can clear the O_NONBLOCK the backend set and fill the counter: the backend's next notification
// then blocks in write(). That may stall the frontend's own ring, but the export must still stop
// the ring when the frontend goes, serve the next frontend, and stop.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/vhost/export_fixture.h"

namespace bexd::test::vhost {
namespace {

enum class Fd { kCall, kErr };

class NotifyFdTest : public VhostExportTest, public ::testing::WithParamInterface<Fd> {};

// Makes the frontend's end of `fd` blocking with the counter at its maximum: one more write
// blocks until somebody reads.
void FillAndBlock(int fd) {
  uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(fd, &count, sizeof(count));  // nonblocking: may be empty
  ASSERT_EQ(eventfd_write(fd, UINT64_C(0xfffffffffffffffe)), 0);
  const int flags = ::fcntl(fd, F_GETFL);
  ASSERT_GE(flags, 0);
  ASSERT_EQ(::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK), 0);
}

TEST_P(NotifyFdTest, AFullBlockingNotifyFdDoesNotHangTheExport) {
  StartExport(1);
  FrontendOptions options = Options(1);
  options.event_idx = false;  // every batch of completions notifies
  std::unique_ptr<Frontend> hostile = ConnectAndInit(options);
  ASSERT_NE(hostile, nullptr);
  const int fd = GetParam() == Fd::kCall ? hostile->call_fd(1) : hostile->err_fd(1);
  FillAndBlock(fd);
  // Whatever happens below, drain the counter at the end so a backend stuck in write() unwinds
  // and the fixture's stop can finish: the test then fails instead of hanging.
  struct Drain {
    int fd;
    ~Drain() {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      uint64_t count;
      [[maybe_unused]] ssize_t n = ::read(fd, &count, sizeof(count));
    }
  } drain{fd};

  const uint16_t used_before = hostile->used_idx(1);
  if (GetParam() == Fd::kCall) {
    struct fuse_getattr_in in = {};
    ASSERT_TRUE(
        hostile->Submit(1, FUSE_GETATTR, FUSE_ROOT_ID, &in, sizeof(in), nullptr, 0, 256).ok());
    // The used entry is published before the notification that blocks.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (hostile->used_idx(1) == used_before && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_NE(hostile->used_idx(1), used_before) << "the request was never answered";
  } else {
    hostile->PublishHead(1, /*head=*/0xffff);  // not a descriptor: the ring breaks
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // into the blocked write
  hostile->Drop();

  // The next frontend gets the export, and its reads return the image.
  std::unique_ptr<Frontend> next = ConnectAndInit(Options(1));
  ASSERT_NE(next, nullptr);
  const uint64_t node = LookupImage(*next);
  const uint64_t handle = OpenImage(*next, node);
  struct fuse_read_in in = {};
  in.fh = handle;
  in.offset = 8192;
  in.size = 4096;
  absl::StatusOr<FuseReply> reply = next->Fuse(1, FUSE_READ, node, &in, sizeof(in), nullptr, 0,
                                               sizeof(struct fuse_out_header) + in.size);
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->header.error, 0);
  ASSERT_EQ(reply->payload.size(), in.size);
  EXPECT_EQ(std::memcmp(reply->payload.data(), &pattern_[in.offset], in.size), 0);
  next.reset();
  // The export stops while the hostile frontend still holds its full, blocking fd.
  export_->Stop();
}

INSTANTIATE_TEST_SUITE_P(Fds, NotifyFdTest, ::testing::Values(Fd::kCall, Fd::kErr),
                         [](const ::testing::TestParamInfo<Fd>& info) {
                           return std::string(info.param == Fd::kCall ? "Call" : "Error");
                         });

}  // namespace
}  // namespace bexd::test::vhost
