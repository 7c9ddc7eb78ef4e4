// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/child_io.h"

#include <cerrno>

namespace bexd::block::qcow2 {
namespace {

int Check(int64_t result, uint64_t length) {
  if (result < 0) return static_cast<int>(result);
  return static_cast<uint64_t>(result) == length ? 0 : -EIO;
}

// Runs one write of a batch and counts it down.
struct BatchState {
  uint32_t left = 0;
  int error = 0;
  std::coroutine_handle<> waiter;
  Scheduler* scheduler = nullptr;
};

Task<void> OneWrite(ChildIo* io, ChildIo::Piece piece, BatchState* batch) {
  int result = co_await io->Write(piece.offset, piece.data, piece.length);
  if (result < 0 && batch->error == 0) batch->error = result;
  if (--batch->left == 0 && batch->waiter) batch->scheduler->Schedule(batch->waiter);
}

struct BatchAwaiter {
  BatchState* batch;
  bool await_ready() const noexcept { return batch->left == 0; }
  void await_suspend(std::coroutine_handle<> handle) { batch->waiter = handle; }
  void await_resume() const noexcept {}
};

}  // namespace

IoRequest ChildIo::Make(IoOp op, uint64_t offset, uint64_t length, const struct iovec* iov,
                        int iovcnt, uint32_t flags) {
  IoRequest request;
  request.op = op;
  request.offset = offset;
  request.length = length;
  request.iov = iov;
  request.iovcnt = iovcnt;
  request.flags = flags;
  return request;
}

Task<int> ChildIo::Read(uint64_t offset, void* buffer, uint64_t length) {
  struct iovec iov = {buffer, length};
  co_return Check(co_await Submit(Make(IoOp::kRead, offset, length, &iov, 1)), length);
}

int64_t ChildIo::Durable(int64_t result) {
  if (result < 0) image_->NoteFlushFailed(static_cast<int>(-result));
  return result;
}

Task<int> ChildIo::Write(uint64_t offset, const void* buffer, uint64_t length) {
  if (FlushFailedBefore()) co_return -EIO;
  struct iovec iov = {const_cast<void*>(buffer), length};
  co_return Check(co_await Submit(Make(IoOp::kWrite, offset, length, &iov, 1)), length);
}

Task<int> ChildIo::WriteV(uint64_t offset, const struct iovec* iov, int iovcnt, uint64_t length,
                          uint32_t flags) {
  if (FlushFailedBefore()) co_return -EIO;
  int64_t result = co_await Submit(Make(IoOp::kWrite, offset, length, iov, iovcnt, flags));
  if ((flags & kIoFua) != 0) result = Durable(result);
  co_return Check(result, length);
}

Task<int> ChildIo::Flush() {
  if (FlushFailedBefore()) co_return -EIO;
  int64_t result = Durable(co_await Submit(Make(IoOp::kFlush, 0, 0, nullptr, 0)));
  co_return result < 0 ? static_cast<int>(result) : 0;
}

Task<int> ChildIo::Discard(uint64_t offset, uint64_t length) {
  if (FlushFailedBefore()) co_return -EIO;
  co_return Check(co_await Submit(Make(IoOp::kDiscard, offset, length, nullptr, 0)), length);
}

Task<int> ChildIo::WriteAll(const std::vector<Piece>& pieces) {
  BatchState batch;
  batch.left = static_cast<uint32_t>(pieces.size());
  batch.scheduler = scheduler_;
  for (const Piece& piece : pieces) Spawn(OneWrite(this, piece, &batch));
  co_await BatchAwaiter{&batch};
  co_return batch.error;
}

}  // namespace bexd::block::qcow2
