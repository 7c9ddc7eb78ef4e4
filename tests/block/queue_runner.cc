// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/block/queue_runner.h"
#include "util/clock.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <time.h>

#include <climits>

namespace bexd::block::testing {
namespace {

void RecordOutcome(IoRequest* request, int64_t result) {
  auto* outcome = static_cast<Outcome*>(request->opaque);
  outcome->done = true;
  outcome->result = result;
  ++outcome->completions;
}

int64_t NowMs() { return static_cast<int64_t>(util::MonotonicNs() / 1'000'000); }

}  // namespace

void Prepare(IoRequest* request, Outcome* outcome, IoOp op, uint64_t offset, uint64_t length,
             const struct iovec* iov, int iovcnt, uint32_t flags) {
  *request = IoRequest();
  request->op = op;
  request->offset = offset;
  request->length = length;
  request->iov = iov;
  request->iovcnt = iovcnt;
  request->flags = flags;
  request->done = RecordOutcome;
  request->opaque = outcome;
}

bool WaitIdle(IoQueue& queue, int timeout_ms) {
  int64_t deadline = NowMs() + timeout_ms;
  queue.Poll();
  while (queue.in_flight() > 0) {
    int64_t left = deadline - NowMs();
    if (left <= 0) return false;
    if (queue.event_fd() >= 0) {
      struct pollfd pfd = {queue.event_fd(), POLLIN, 0};
      poll(&pfd, 1, static_cast<int>(left < 100 ? left : 100));
    }
    queue.Poll();
  }
  return true;
}

int64_t RunOne(IoQueue& queue, IoOp op, uint64_t offset, uint64_t length, const struct iovec* iov,
               int iovcnt, uint32_t flags, bool* status_data) {
  IoRequest request;
  Outcome outcome;
  Prepare(&request, &outcome, op, offset, length, iov, iovcnt, flags);
  queue.Submit(&request);
  EXPECT_FALSE(outcome.done) << "completed inside Submit()";
  if (!WaitIdle(queue)) {
    ADD_FAILURE() << "request did not complete";
    return INT64_MIN;
  }
  EXPECT_EQ(outcome.completions, 1);
  if (status_data != nullptr) *status_data = request.status_data;
  return outcome.result;
}

int64_t ReadAt(IoQueue& queue, void* buffer, uint64_t length, uint64_t offset) {
  struct iovec iov = {buffer, length};
  return RunOne(queue, IoOp::kRead, offset, length, &iov, 1);
}

int64_t WriteAt(IoQueue& queue, const void* buffer, uint64_t length, uint64_t offset,
                uint32_t flags) {
  struct iovec iov = {const_cast<void*>(buffer), length};
  return RunOne(queue, IoOp::kWrite, offset, length, &iov, 1, flags);
}

std::vector<unsigned char> Pattern(size_t length, uint32_t seed) {
  std::vector<unsigned char> bytes(length);
  uint32_t x = seed * 2654435761u + 12345;
  for (size_t i = 0; i < length; ++i) {
    x = x * 1103515245u + 12345;
    bytes[i] = static_cast<unsigned char>(x >> 16);
  }
  return bytes;
}

}  // namespace bexd::block::testing
