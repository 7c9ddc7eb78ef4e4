// SPDX-License-Identifier: GPL-2.0-or-later
// Malformed requests: every one completes exactly once, with an error reply when a header fits
// in `out`, or a negative result when the bytes are not a FUSE request at all.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <climits>

#include "tests/fuse/core_harness.h"

namespace bexd::fuse::testing {
namespace {

constexpr uint64_t kNullSize = 16 << 20;

block::BlockdevOptions NullNode() {
  block::BlockdevOptions options;
  options.node_name = "null0";
  options.driver = block::NullOptions{kNullSize, /*read_zeroes=*/true, 0};
  return options;
}

class ValidationTest : public ::testing::Test {
 protected:
  ValidationTest() : harness_(NullNode(), Options()) { harness_.Init(); }
  static SessionOptions Options() {
    SessionOptions options;
    options.writable = true;
    return options;
  }
  // Runs a request that must be answered with `error`.
  void ExpectError(const std::vector<uint8_t>& request, int error, const Layout& layout = {}) {
    Reply reply = harness_.Run(request, layout);
    EXPECT_EQ(reply.completions, 1);
    ASSERT_EQ(reply.result, sizeof(fuse_out_header));
    EXPECT_EQ(reply.header().len, sizeof(fuse_out_header));
    EXPECT_EQ(reply.error(), error);
    EXPECT_EQ(reply.header().unique, 7u);
  }
  // Runs bytes that are no FUSE request: no reply, a negative result.
  void ExpectRejected(const std::vector<uint8_t>& request, int64_t result = -EINVAL) {
    Reply reply = harness_.Run(request);
    EXPECT_EQ(reply.completions, 1);
    EXPECT_EQ(reply.result, result);
  }

  CoreHarness harness_;
};

TEST_F(ValidationTest, TruncatedHeaderIsRejected) {
  std::vector<uint8_t> request = ReadRequest(1, 0, 4096);
  for (size_t size : {size_t{0}, size_t{1}, size_t{16}, sizeof(fuse_in_header) - 1}) {
    std::vector<uint8_t> truncated(request.begin(), request.begin() + size);
    uint32_t len = static_cast<uint32_t>(size);
    if (size >= sizeof(len)) std::memcpy(truncated.data(), &len, sizeof(len));
    ExpectRejected(truncated);
  }
}

TEST_F(ValidationTest, LengthThatContradictsTheBuffersIsRejected) {
  fuse_getattr_in in{};
  RequestBytes bytes(FUSE_GETATTR, 1);
  bytes.Append(in);
  const uint32_t actual = sizeof(fuse_in_header) + sizeof(in);
  ExpectRejected(bytes.FinishWithLength(actual + 1));
  ExpectRejected(bytes.FinishWithLength(actual - 1));
  ExpectRejected(bytes.FinishWithLength(0));
  ExpectRejected(bytes.FinishWithLength(UINT32_MAX));
}

TEST_F(ValidationTest, ShortArgumentsAreAnsweredWithEinval) {
  const uint32_t opcodes[] = {FUSE_GETATTR, FUSE_SETATTR, FUSE_OPEN,  FUSE_RELEASE,   FUSE_READ,
                              FUSE_WRITE,   FUSE_FLUSH,   FUSE_FSYNC, FUSE_FALLOCATE, FUSE_LSEEK};
  for (uint32_t opcode : opcodes) {
    SCOPED_TRACE(opcode);
    const uint8_t four_bytes[4] = {};
    ExpectError(RequestBytes(opcode, 1).AppendBytes(four_bytes, sizeof(four_bytes)).Finish(),
                EINVAL);
    ExpectError(RequestBytes(opcode, 1).Finish(), EINVAL);
  }
  // INIT needs at least the pre-7.36 16 bytes.
  const uint8_t eight_bytes[8] = {7, 0, 0, 0, 38};
  ExpectError(RequestBytes(FUSE_INIT, 0).AppendBytes(eight_bytes, 8).Finish(), EINVAL);
}

TEST_F(ValidationTest, ExtensionLengthBeyondTheRequestIsEinval) {
  std::vector<uint8_t> request = ReadRequest(1, 0, 512);
  const uint16_t extension_units = 100;  // 800 bytes, more than the request holds
  std::memcpy(request.data() + offsetof(fuse_in_header, total_extlen), &extension_units, 2);
  ExpectError(request, EINVAL);
}

TEST_F(ValidationTest, ReadBiggerThanMaxWriteIsEinval) {
  ExpectError(ReadRequest(1, 0, (1u << 20) + 4096), EINVAL);
  ExpectError(ReadRequest(1, 0, UINT32_MAX), EINVAL);
}

TEST_F(ValidationTest, WriteWhosePayloadDisagreesWithItsSizeIsEinval) {
  std::vector<uint8_t> request = WriteRequest(1, 0, std::vector<uint8_t>(512, 1));
  uint32_t claimed = 1024;
  std::memcpy(request.data() + sizeof(fuse_in_header) + offsetof(fuse_write_in, size), &claimed,
              sizeof(claimed));
  ExpectError(request, EINVAL);
  claimed = 256;
  std::memcpy(request.data() + sizeof(fuse_in_header) + offsetof(fuse_write_in, size), &claimed,
              sizeof(claimed));
  ExpectError(request, EINVAL);
}

TEST_F(ValidationTest, WriteBiggerThanMaxWriteIsEinval) {
  ExpectError(WriteRequest(1, 0, std::vector<uint8_t>((1u << 20) + 4096, 1)), EINVAL);
}

TEST_F(ValidationTest, OffsetsThatOverflowAreRejected) {
  ExpectError(ReadRequest(1, UINT64_MAX - 10, 4096), EINVAL);
  ExpectError(ReadRequest(1, uint64_t{INT64_MAX} + 1, 1), EINVAL);
  ExpectError(ReadRequest(1, INT64_MAX, 2), EINVAL);
  ExpectError(WriteRequest(1, UINT64_MAX - 10, std::vector<uint8_t>(4096, 1)), EINVAL);
  fuse_fallocate_in fallocate{1, uint64_t{INT64_MAX}, 2, 0, 0};
  ExpectError(RequestBytes(FUSE_FALLOCATE, 1).Append(fallocate).Finish(), EFBIG);
  fuse_lseek_in lseek{1, uint64_t{INT64_MAX}, SEEK_END, 0};
  ExpectError(RequestBytes(FUSE_LSEEK, 1).Append(lseek).Finish(), EINVAL);
}

TEST_F(ValidationTest, UnknownNodeIsEnoent) {
  fuse_getattr_in getattr{};
  ExpectError(RequestBytes(FUSE_GETATTR, 2).Append(getattr).Finish(), ENOENT);
  ExpectError(RequestBytes(FUSE_GETATTR, 0).Append(getattr).Finish(), ENOENT);
  ExpectError(ReadRequest(UINT64_MAX, 0, 4096), ENOENT);
  ExpectError(WriteRequest(99, 0, std::vector<uint8_t>(16, 1)), ENOENT);
  fuse_open_in open{O_RDONLY, 0};
  ExpectError(RequestBytes(FUSE_OPEN, 5).Append(open).Finish(), ENOENT);
}

TEST_F(ValidationTest, UnknownOpcodeIsEnosys) {
  for (uint32_t opcode : {0u, 19u, 52u, 53u, 1000u, 4096u, UINT32_MAX}) {
    SCOPED_TRACE(opcode);
    ExpectError(RequestBytes(opcode, 1).Finish(), ENOSYS);
  }
}

TEST_F(ValidationTest, OutBufferTooSmallForTheReply) {
  fuse_getattr_in in{};
  const std::vector<uint8_t> getattr = RequestBytes(FUSE_GETATTR, 1).Append(in).Finish();
  // Room for a header but not the attributes: an error reply.
  ExpectError(getattr, EINVAL, Layout{.out_capacity = sizeof(fuse_out_header) + 8});
  // Not even a header fits: nothing can be answered.
  Reply reply = harness_.Run(getattr, Layout{.out_capacity = sizeof(fuse_out_header) - 1});
  EXPECT_EQ(reply.completions, 1);
  EXPECT_EQ(reply.result, -ENOBUFS);
  reply = harness_.Run(getattr, Layout{.out_capacity = 0});
  EXPECT_EQ(reply.completions, 1);
  EXPECT_EQ(reply.result, -ENOBUFS);
  // A READ whose data would not fit is refused before any I/O.
  ExpectError(ReadRequest(1, 0, 8192), EINVAL, Layout{.out_capacity = 4096});
}

TEST_F(ValidationTest, MissingOrNegativeIovecArraysAreRejected) {
  std::vector<uint8_t> bytes = ReadRequest(1, 0, 16);
  struct iovec in = {bytes.data(), bytes.size()};
  uint8_t out_bytes[64];
  struct iovec out = {out_bytes, sizeof(out_bytes)};
  int completions = 0;
  int64_t result = 0;
  struct Sink {
    int* completions;
    int64_t* result;
  } sink{&completions, &result};
  auto io_queue = harness_.node().CreateQueue();
  ASSERT_TRUE(io_queue.ok());
  Queue queue(
      std::shared_ptr<Session>(&harness_.session(), [](Session*) {}), std::move(*io_queue),
      [](Request*, int64_t r, void* context) {
        auto* s = static_cast<Sink*>(context);
        ++*s->completions;
        *s->result = r;
      },
      &sink);
  auto request = std::make_unique<Request>();
  request->in = &in;
  request->in_count = -1;
  request->out = &out;
  request->out_count = 1;
  queue.Dispatch(request.get());
  EXPECT_EQ(completions, 1);
  EXPECT_EQ(result, -EINVAL);
  request->in_count = 1;
  request->out = nullptr;
  request->out_count = 2;
  queue.Dispatch(request.get());
  EXPECT_EQ(completions, 2);
  EXPECT_EQ(result, -EINVAL);
}

TEST_F(ValidationTest, NoReplyOpcodesCompleteWithZeroOrRejectGarbage) {
  fuse_forget_in forget{1};
  Reply reply = harness_.Run(RequestBytes(FUSE_FORGET, 1).Append(forget).Finish());
  EXPECT_EQ(reply.completions, 1);
  EXPECT_EQ(reply.result, 0);
  fuse_interrupt_in interrupt{3};
  reply = harness_.Run(RequestBytes(FUSE_INTERRUPT, 0).Append(interrupt).Finish());
  EXPECT_EQ(reply.completions, 1);
  EXPECT_EQ(reply.result, 0);
  // No-reply requests need no out buffer at all.
  reply =
      harness_.Run(RequestBytes(FUSE_FORGET, 1).Append(forget).Finish(), Layout{.out_capacity = 0});
  EXPECT_EQ(reply.result, 0);

  fuse_batch_forget_in batch{2, 0};
  fuse_forget_one one{1, 1};
  reply = harness_.Run(
      RequestBytes(FUSE_BATCH_FORGET, 0).Append(batch).Append(one).Append(one).Finish());
  EXPECT_EQ(reply.completions, 1);
  EXPECT_EQ(reply.result, 0);
  // The count must match the entries carried.
  ExpectRejected(RequestBytes(FUSE_BATCH_FORGET, 0).Append(batch).Append(one).Finish());
  batch.count = UINT32_MAX;
  ExpectRejected(RequestBytes(FUSE_BATCH_FORGET, 0).Append(batch).Append(one).Finish());
  ExpectRejected(RequestBytes(FUSE_FORGET, 1).Finish());
  ExpectRejected(RequestBytes(FUSE_INTERRUPT, 0).AppendBytes("abc", 3).Finish());
}

TEST(ValidationBeforeInitTest, RequestsBeforeInitAreEio) {
  SessionOptions options;
  CoreHarness harness(NullNode(), options);
  Reply reply = harness.Run(ReadRequest(1, 0, 4096));
  ASSERT_EQ(reply.result, sizeof(fuse_out_header));
  EXPECT_EQ(reply.error(), EIO);
}

}  // namespace
}  // namespace bexd::fuse::testing
