// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/sync_io.h"

#include <poll.h>

#include <cerrno>

namespace bexd::block::qcow2 {
namespace {

struct Completion {
  bool done = false;
  int64_t result = 0;
};

void Record(IoRequest* request, int64_t result) {
  auto* completion = static_cast<Completion*>(request->opaque);
  completion->done = true;
  completion->result = result;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SyncIo>> SyncIo::Create(BlockNode& node) {
  auto queue = node.CreateQueue();
  if (!queue.ok()) return queue.status();
  return std::unique_ptr<SyncIo>(new SyncIo(std::move(*queue)));
}

int64_t SyncIo::Run(IoRequest* request) {
  Completion completion;
  request->done = Record;
  request->opaque = &completion;
  queue_->Submit(request);
  queue_->Poll();
  while (!completion.done) {
    if (queue_->event_fd() >= 0) {
      struct pollfd pfd = {queue_->event_fd(), POLLIN, 0};
      poll(&pfd, 1, -1);
    }
    queue_->Poll();
  }
  return completion.result;
}

int SyncIo::Transfer(IoOp op, uint64_t offset, void* buffer, uint64_t length) {
  struct iovec iov = {buffer, length};
  IoRequest request;
  request.op = op;
  request.offset = offset;
  request.length = length;
  request.iov = &iov;
  request.iovcnt = 1;
  int64_t result = Run(&request);
  if (result < 0) return static_cast<int>(result);
  return static_cast<uint64_t>(result) == length ? 0 : -EIO;
}

int SyncIo::Read(uint64_t offset, void* buffer, uint64_t length) {
  return Transfer(IoOp::kRead, offset, buffer, length);
}

int SyncIo::Write(uint64_t offset, const void* buffer, uint64_t length) {
  return Transfer(IoOp::kWrite, offset, const_cast<void*>(buffer), length);
}

int SyncIo::Flush() {
  IoRequest request;
  request.op = IoOp::kFlush;
  return static_cast<int>(Run(&request));
}

}  // namespace bexd::block::qcow2
