// SPDX-License-Identifier: GPL-2.0-or-later
// The libaio context that every aio=native FileQueue of one thread shares. A context per queue
// cost every image of a qcow2 chain a context per queue thread and per metadata thread out of
// fs.aio-max-nr (a chain of 85 images could not open with one export queue), and io_destroy waits
// for an RCU grace period (~30 ms), so opening and closing a chain took ~80 ms per image. Now a
// thread makes one context on first use, and when the thread has ended and the last queue on the
// context is gone, the context goes back to a pool for the next thread instead of io_destroy
// (kPoolSize of them; the rest are destroyed on a thread of their own, so that a long chain
// closed does not keep its share of the host's fs.aio-max-nr); the kernel frees the pooled ones
// when the process exits.
//
// Each iocb still signals its own queue's eventfd, but the thread's completions share one ring:
// the queue that takes another queue's event hands it over (FileQueue::HandOver). Room in the
// ring is shared too: a queue that finds it full waits for room (WaitForRoom), and the next Take()
// that frees some signals it.
//
// Not thread-safe: only the thread that made the context, or after it ended whoever destroys its
// queues, uses it.
#pragma once

#include <absl/status/statusor.h>
#include <libaio.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "block/aio_event_ring.h"

namespace bexd::block {

class AioContext {
 public:
  // Requests in the kernel at once, for all of a thread's queues together.
  static constexpr uint32_t kDepth = 256;
  // Contexts kept for later threads once theirs have ended; more are destroyed. Enough for the
  // threads of a few exports coming and going.
  static constexpr size_t kPoolSize = 16;

  // The calling thread's context.
  static absl::StatusOr<std::shared_ptr<AioContext>> ForThisThread();

  io_context_t handle() const { return handle_; }
  uint32_t room() const { return kDepth - in_kernel_; }
  uint32_t in_kernel() const { return in_kernel_; }
  void Submitted(uint32_t count) { in_kernel_ += count; }

  // Copies up to `capacity` finished events, any queue's, without waiting (AioEventRing::Take).
  int Take(struct io_event* events, int capacity);

  // `event_fd` is signalled when a Take() frees room; ForgetRoomWaiter() before it closes.
  void WaitForRoom(int event_fd);
  void ForgetRoomWaiter(int event_fd);

 private:
  static void Release(AioContext* context);
  static void DestroySurplus();

  explicit AioContext(io_context_t handle) : handle_(handle), events_(handle) {
    room_waiters_.reserve(16);  // no allocation on the I/O path for the usual few queues
  }

  ~AioContext();

  const io_context_t handle_;
  AioEventRing events_;
  uint32_t in_kernel_ = 0;
  std::vector<int> room_waiters_;
};

}  // namespace bexd::block
