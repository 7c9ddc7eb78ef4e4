// SPDX-License-Identifier: GPL-2.0-or-later
// One queue thread's I/O context on an RbdNode. Each request becomes one asynchronous librbd
// call (rbd_aio_readv/writev/flush/discard/write_zeroes); librbd runs its completion on one of
// its own threads, which stores the result in the request, pushes the request onto this queue's
// RequestStack and, when that was empty, writes the queue's eventfd. Poll() takes the
// finished requests and runs their callbacks on the queue thread. No lock; the only allocations
// per request are librbd's own (its completion object and internal request state).
#pragma once

#include <absl/status/statusor.h>
#include <rbd/librbd.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "block/block_node.h"
#include "block/rbd/rbd_node.h"
#include "block/request_list.h"
#include "block/request_stack.h"

namespace bexd::block {

class RbdQueue final : public IoQueue {
 public:
  static absl::StatusOr<std::unique_ptr<RbdQueue>> Create(std::shared_ptr<RbdNode> node);
  // Waits until librbd has completed every request it was given (bounded by the cluster's
  // operation timeout); their callbacks never run.
  ~RbdQueue() override;

  void Submit(IoRequest* request) override;
  void Poll() override;
  int event_fd() const override { return event_fd_; }
  uint32_t in_flight() const override { return in_flight_; }

 private:
  RbdQueue(std::shared_ptr<RbdNode> node, int event_fd)
      : node_(std::move(node)), event_fd_(event_fd) {}

  // librbd's completion callback, on a librbd thread.
  static void OnComplete(rbd_completion_t completion, void* arg);
  // Starts the request's librbd call; false (with the result stored) if it could not start.
  bool StartLibrbd(IoRequest* request);
  void CompleteLater(IoRequest* request, int64_t result);

  std::shared_ptr<RbdNode> node_;
  const int event_fd_;
  RequestStack finished_;
  // Requests librbd holds; each completion callback decrements it as its very last step, so
  // the destructor knows when no librbd thread can touch this queue any more.
  std::atomic<uint32_t> in_librbd_{0};
  RequestList local_;  // completed without librbd; callbacks run at the next Poll()
  uint32_t in_flight_ = 0;
};

}  // namespace bexd::block
