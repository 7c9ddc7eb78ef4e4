// SPDX-License-Identifier: GPL-2.0-or-later
// A frontend or guest repeating something that is logged cannot flood the log: each message site
// writes a few lines per interval (util/rate_limit.h), however often it is triggered.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <string>

#include "export/vhost_user/vhost_user_protocol.h"
#include "export/vhost_user/virtqueue.h"
#include "tests/vhost/export_fixture.h"

namespace bexd::test::vhost {
namespace {

namespace proto = exports::vhost;

// Lines of `log` that contain `text`.
int LinesWith(const std::string& log, const std::string& text) {
  std::istringstream lines(log);
  int count = 0;
  for (std::string line; std::getline(lines, line);) count += line.find(text) != std::string::npos;
  return count;
}

// Far fewer lines than triggers, but room for the burst of more than one interval should the
// flood take that long on a busy machine. (No lower bound: an earlier test in the same process
// may have spent this interval's burst of a site.)
constexpr int kMaxLines = 20;

class LogFloodTest : public VhostExportTest {
 protected:
  void SetUp() override {
    VhostExportTest::SetUp();
    StartExport(2);
    frontend_ = ConnectAndInit(Options(2));
    ASSERT_NE(frontend_, nullptr);
  }
  std::unique_ptr<Frontend> frontend_;
};

TEST_F(LogFloodTest, RefusedMessages) {
  constexpr int kMessages = 500;
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < kMessages; ++i) {
    proto::VringState not_power_of_two = {1, 100};
    absl::StatusOr<uint64_t> verdict =
        frontend_->Send(proto::kSetVringNum, &not_power_of_two, sizeof(not_power_of_two));
    ASSERT_TRUE(verdict.ok()) << verdict.status();
    ASSERT_NE(*verdict, 0u);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  const int lines = LinesWith(log, "SET_VRING_NUM: vring 1 size 100 is not a power of two");
  EXPECT_LE(lines, kMaxLines) << log;
  EXPECT_EQ(LookupImage(*frontend_), 2u);
}

TEST_F(LogFloodTest, GuestBreakingTheRingAgainAndAgain) {
  constexpr int kBreaks = 60;
  namespace vring = exports::vring;
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < kBreaks; ++i) {
    // A descriptor chain that loops; the frontend then restarts the broken ring, as QEMU would
    // after a guest driver reset.
    frontend_->WriteDesc(1, 100, {frontend_->ScratchGpa(), 16, vring::kDescNext, 101});
    frontend_->WriteDesc(1, 101, {frontend_->ScratchGpa(), 16, vring::kDescNext, 100});
    frontend_->PublishHead(1, 100);
    ASSERT_TRUE(frontend_->WaitRingError(1)) << "break " << i;
    ASSERT_TRUE(frontend_->StartRing(1).ok());
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  const int lines = LinesWith(log, "the guest broke the virtqueue");
  EXPECT_LE(lines, kMaxLines) << log;
  EXPECT_EQ(LookupImage(*frontend_, 1), 2u);
}

TEST_F(LogFloodTest, FrontendsConnectingWhileOneIsConnected) {
  constexpr int kConnections = 300;
  struct sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_.size(), sizeof(address.sun_path));
  memcpy(address.sun_path, socket_.data(), socket_.size());
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < kConnections; ++i) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    // The backend accepts and closes it: wait for that (bounded) so every refusal is logged
    // before the count.
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char byte;
    ASSERT_EQ(recv(fd, &byte, 1, 0), 0);
    close(fd);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  const int lines = LinesWith(log, "refusing a second frontend");
  EXPECT_LE(lines, kMaxLines) << log;
  EXPECT_EQ(LookupImage(*frontend_), 2u);
}

}  // namespace
}  // namespace bexd::test::vhost
