// SPDX-License-Identifier: GPL-2.0-or-later
// The vhost-user control protocol: bad messages get a negative acknowledgement or close the
// connection, never more; rings stop, restart and survive memory table changes; a frontend that
// drops with requests in flight is followed by a working one.
#include <fcntl.h>
#include <linux/fuse.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "export/vhost_user/vhost_user_protocol.h"
#include "tests/vhost/export_fixture.h"

namespace bexd::test::vhost {
namespace {

namespace proto = exports::vhost;

// Whether the backend closed the connection (reads EOF within the frontend's timeout).
bool ClosedByBackend(Frontend& frontend) {
  struct timeval tv = {10, 0};
  setsockopt(frontend.socket_fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char byte;
  return recv(frontend.socket_fd(), &byte, 1, 0) == 0;
}

// Sends raw bytes as one message.
void SendRaw(Frontend& frontend, const void* data, size_t size) {
  ASSERT_EQ(send(frontend.socket_fd(), data, size, MSG_NOSIGNAL), static_cast<ssize_t>(size));
}

class ProtocolTest : public VhostExportTest {
 protected:
  void SetUp() override {
    VhostExportTest::SetUp();
    StartExport(1);
    frontend_ = ConnectAndInit(Options());
    ASSERT_NE(frontend_, nullptr);
  }
  // After the backend dropped the connection, a new frontend is served.
  void ExpectNextFrontendServed() {
    frontend_.reset();
    std::unique_ptr<Frontend> next = ConnectAndInit(Options());
    ASSERT_NE(next, nullptr);
    EXPECT_EQ(LookupImage(*next), 2u);
  }
  std::unique_ptr<Frontend> frontend_;
};

TEST_F(ProtocolTest, UnknownMessageWithAckGetsNegativeAck) {
  absl::StatusOr<uint64_t> acked = frontend_->Send(77, nullptr, 0);
  ASSERT_TRUE(acked.ok()) << acked.status();
  EXPECT_NE(*acked, 0u);
  EXPECT_EQ(LookupImage(*frontend_), 2u);  // the connection goes on
}

TEST_F(ProtocolTest, UnknownMessageWithoutAckClosesConnection) {
  ASSERT_TRUE(frontend_->Send(77, nullptr, 0, {}, false).ok());
  EXPECT_TRUE(ClosedByBackend(*frontend_));
  ExpectNextFrontendServed();
}

TEST_F(ProtocolTest, WrongPayloadSizeWithoutAckClosesConnection) {
  uint32_t index = 1;  // SET_VRING_NUM needs 8 bytes
  ASSERT_TRUE(frontend_->Send(proto::kSetVringNum, &index, sizeof(index), {}, false).ok());
  EXPECT_TRUE(ClosedByBackend(*frontend_));
  ExpectNextFrontendServed();
}

TEST_F(ProtocolTest, AQueryWithAPayloadClosesConnection) {
  const uint64_t payload = 0;  // GET_* requests carry none
  ASSERT_TRUE(frontend_->Send(proto::kGetQueueNum, &payload, sizeof(payload), {}, false).ok());
  EXPECT_TRUE(ClosedByBackend(*frontend_));
  ExpectNextFrontendServed();
}

TEST_F(ProtocolTest, BadVringValuesGetNegativeAck) {
  proto::VringState not_power_of_two = {1, 100};
  proto::VringState too_big = {1, 4096};
  proto::VringState no_such_ring = {9, 128};
  for (const proto::VringState& state : {not_power_of_two, too_big, no_such_ring}) {
    absl::StatusOr<uint64_t> acked = frontend_->Send(proto::kSetVringNum, &state, sizeof(state));
    ASSERT_TRUE(acked.ok()) << acked.status();
    EXPECT_NE(*acked, 0u) << state.index << " " << state.num;
  }
  uint64_t bad_bits = 1 | (uint64_t{1} << 20);
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  absl::StatusOr<uint64_t> acked = frontend_->Send(proto::kSetVringCall, &bad_bits, 8, {fd});
  close(fd);
  ASSERT_TRUE(acked.ok());
  EXPECT_NE(*acked, 0u);
}

TEST_F(ProtocolTest, FileDescriptorCountIsChecked) {
  // SET_VRING_KICK without its fd, and SET_OWNER with one it must not carry.
  uint64_t kick = 1;
  absl::StatusOr<uint64_t> acked = frontend_->Send(proto::kSetVringKick, &kick, 8, {});
  ASSERT_TRUE(acked.ok());
  EXPECT_NE(*acked, 0u);
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  acked = frontend_->Send(proto::kSetOwner, nullptr, 0, {fd});
  ASSERT_TRUE(acked.ok());
  EXPECT_NE(*acked, 0u);
  // A memory table with one region but two fds.
  proto::Memory table = {};
  table.nregions = 1;
  table.regions[0] = {0, 1 << 20, 0x10000000, 0};
  acked = frontend_->Send(proto::kSetMemTable, &table, sizeof(table), {fd, fd});
  close(fd);
  ASSERT_TRUE(acked.ok());
  EXPECT_NE(*acked, 0u);
  EXPECT_EQ(LookupImage(*frontend_), 2u);
}

TEST_F(ProtocolTest, MemoryTableLargerThanItsFileIsRefused) {
  int fd = memfd_create("small", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  proto::Memory table = {};
  table.nregions = 1;
  table.regions[0] = {0, 1 << 20, 0x10000000, 0};
  absl::StatusOr<uint64_t> acked =
      frontend_->Send(proto::kSetMemTable, &table, sizeof(table), {fd});
  close(fd);
  ASSERT_TRUE(acked.ok());
  EXPECT_NE(*acked, 0u);
  EXPECT_EQ(LookupImage(*frontend_), 2u);  // the old table still serves
}

TEST_F(ProtocolTest, BadVersionClosesConnection) {
  proto::Header header = {proto::kGetFeatures, 0x2, 0};
  SendRaw(*frontend_, &header, sizeof(header));
  EXPECT_TRUE(ClosedByBackend(*frontend_));
  ExpectNextFrontendServed();
}

TEST_F(ProtocolTest, OversizedPayloadClosesConnection) {
  proto::Header header = {proto::kSetFeatures, proto::kVersion, 1 << 20};
  SendRaw(*frontend_, &header, sizeof(header));
  EXPECT_TRUE(ClosedByBackend(*frontend_));
  ExpectNextFrontendServed();
}

TEST_F(ProtocolTest, TruncatedMessageThenHangUp) {
  proto::Header header = {proto::kSetFeatures, proto::kVersion, 8};
  SendRaw(*frontend_, &header, sizeof(header));
  SendRaw(*frontend_, "abc", 3);
  ExpectNextFrontendServed();
}

TEST_F(ProtocolTest, SecondFrontendIsRefusedWhileOneIsConnected) {
  FrontendOptions options = Options();
  options.timeout = std::chrono::milliseconds(2000);
  EXPECT_FALSE(Frontend::Connect(options).ok());
  EXPECT_EQ(LookupImage(*frontend_), 2u);
  EXPECT_TRUE(export_->in_use());
}

// The FUSE session belongs to one frontend: after a disconnect or RESET_OWNER, the next one must
// send INIT before anything else is served.
TEST_F(ProtocolTest, EachFrontendStartsANewFuseSession) {
  const uint64_t node = LookupImage(*frontend_);
  for (bool reset_owner : {false, true}) {
    SCOPED_TRACE(reset_owner ? "after RESET_OWNER" : "after a disconnect");
    if (reset_owner) {
      absl::StatusOr<uint64_t> acked = frontend_->Send(proto::kResetOwner, nullptr, 0);
      ASSERT_TRUE(acked.ok()) << acked.status();
      ASSERT_EQ(*acked, 0u);
    }
    frontend_.reset();
    absl::StatusOr<std::unique_ptr<Frontend>> next = Frontend::Connect(Options());
    ASSERT_TRUE(next.ok()) << next.status();
    struct fuse_getattr_in in = {};
    absl::StatusOr<FuseReply> reply =
        (*next)->Fuse(1, FUSE_GETATTR, node, &in, sizeof(in), nullptr, 0, 256);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->header.error, -EIO) << "served before INIT";
    ASSERT_TRUE((*next)->Init().ok());
    EXPECT_EQ(LookupImage(**next), node);
    frontend_ = std::move(*next);
  }
}

TEST_F(ProtocolTest, StopAndRestartRingKeepsPosition) {
  uint64_t node = LookupImage(*frontend_);
  // INIT and LOOKUP ran on ring 1.
  absl::StatusOr<uint32_t> base = frontend_->GetVringBase(1);
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_EQ(*base, 2u);
  ASSERT_TRUE(frontend_->StartRing(1).ok());
  uint64_t fh = OpenImage(*frontend_, node);
  struct fuse_read_in in = {};
  in.fh = fh;
  in.size = 4096;
  absl::StatusOr<FuseReply> reply =
      frontend_->Fuse(1, FUSE_READ, node, &in, sizeof(in), nullptr, 0, 16 + 4096);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_TRUE(std::equal(reply->payload.begin(), reply->payload.end(), pattern_.begin()));
}

TEST_F(ProtocolTest, MemoryTableReplacedWithRequestsInFlight) {
  uint64_t node = LookupImage(*frontend_);
  uint64_t fh = OpenImage(*frontend_, node);
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 16; ++i) {
      struct fuse_read_in in = {};
      in.fh = fh;
      in.offset = uint64_t(i) * 65536;
      in.size = 65536;
      ASSERT_TRUE(
          frontend_->Submit(1, FUSE_READ, node, &in, sizeof(in), nullptr, 0, 16 + 65536).ok());
    }
    ASSERT_TRUE(frontend_->SendMemTable().ok());
    int done = 0;
    while (done < 16) {
      absl::StatusOr<std::vector<Completion>> completions = frontend_->WaitCompletions(1);
      ASSERT_TRUE(completions.ok()) << completions.status();
      for (const Completion& c : *completions) {
        FuseReply reply = frontend_->ReplyOf(1, c);
        ASSERT_EQ(reply.header.error, 0);
        ASSERT_EQ(reply.payload.size(), 65536u);
        ++done;
      }
    }
  }
}

TEST_F(ProtocolTest, FrontendDropsWithRequestsInFlight) {
  uint64_t node = LookupImage(*frontend_);
  uint64_t fh = OpenImage(*frontend_, node);
  std::vector<unsigned char> data(65536, 0x5a);
  for (int i = 0; i < 16; ++i) {
    struct fuse_write_in in = {};
    in.fh = fh;
    in.offset = uint64_t(i) * 65536;
    in.size = 65536;
    ASSERT_TRUE(
        frontend_->Submit(1, FUSE_WRITE, node, &in, sizeof(in), data.data(), data.size(), 4096)
            .ok());
  }
  frontend_->Drop();
  ExpectNextFrontendServed();
}

}  // namespace
}  // namespace bexd::test::vhost
