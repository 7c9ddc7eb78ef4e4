// SPDX-License-Identifier: GPL-2.0-or-later
// Awaitable requests to a child queue on the engine thread: the coroutine suspends until the
// child's callback reports completion, then the scheduler resumes it.
#pragma once

#include <sys/uio.h>

#include <coroutine>
#include <cstdint>
#include <memory>
#include <vector>

#include "block/block_node.h"
#include "block/qcow2/image_state.h"
#include "block/qcow2/task.h"

namespace bexd::block::qcow2 {

class IoAwaiter {
 public:
  IoAwaiter(Scheduler* scheduler, IoQueue* queue, const IoRequest& request)
      : scheduler_(scheduler), queue_(queue), request_(request) {}
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> handle) {
    handle_ = handle;
    request_.done = &Done;
    request_.opaque = this;
    queue_->Submit(&request_);
  }
  // The child's result: bytes, or -errno.
  int64_t await_resume() const { return result_; }
  const IoRequest& request() const { return request_; }

 private:
  static void Done(IoRequest* request, int64_t result) {
    auto* self = static_cast<IoAwaiter*>(request->opaque);
    self->result_ = result;
    self->scheduler_->Schedule(self->handle_);
  }

  Scheduler* scheduler_;
  IoQueue* queue_;
  IoRequest request_;
  std::coroutine_handle<> handle_;
  int64_t result_ = 0;
};

// Builds child requests and runs several at once. Once a flush (or FUA write) of the image has
// failed (ImageState::flush_failed), writes, discards and flushes fail with -EIO without reaching
// the child: nothing written after such a failure may refer to what the disk dropped.
class ChildIo {
 public:
  ChildIo(Scheduler* scheduler, IoQueue* queue, ImageState* image)
      : scheduler_(scheduler), queue_(queue), image_(image) {}

  static IoRequest Make(IoOp op, uint64_t offset, uint64_t length, const struct iovec* iov,
                        int iovcnt, uint32_t flags = 0);
  IoAwaiter Submit(const IoRequest& request) { return IoAwaiter(scheduler_, queue_, request); }

  // Each returns 0 or -errno; a short transfer is -EIO.
  Task<int> Read(uint64_t offset, void* buffer, uint64_t length);
  Task<int> Write(uint64_t offset, const void* buffer, uint64_t length);
  Task<int> WriteV(uint64_t offset, const struct iovec* iov, int iovcnt, uint64_t length,
                   uint32_t flags = 0);
  Task<int> Flush();
  Task<int> Discard(uint64_t offset, uint64_t length);

  // Writes every (offset, buffer) pair at once; the first error, or 0.
  struct Piece {
    uint64_t offset;
    const uint8_t* data;
    uint64_t length;
  };
  Task<int> WriteAll(const std::vector<Piece>& pieces);

  Scheduler* scheduler() const { return scheduler_; }
  IoQueue* queue() const { return queue_; }

 private:
  bool FlushFailedBefore() const {
    return image_->flush_failed.load(std::memory_order_acquire) != 0;
  }
  // A flush or FUA write's result, noted in the image when it failed.
  int64_t Durable(int64_t result);

  Scheduler* scheduler_;
  IoQueue* queue_;
  ImageState* image_;
};

}  // namespace bexd::block::qcow2
