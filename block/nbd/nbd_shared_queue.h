// SPDX-License-Identifier: GPL-2.0-or-later
// A queue thread's I/O context on an nbd node whose server allows one connection only: requests
// go to the node's connection thread and come back through a lock-free stack and this queue's
// eventfd, so callbacks still run on the submitting thread, inside Poll().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "block/block_node.h"
#include "block/nbd/nbd_connection_thread.h"
#include "block/request_list.h"
#include "block/request_stack.h"

namespace bexd::block {

class NbdSharedQueue final : public IoQueue {
 public:
  NbdSharedQueue(std::shared_ptr<const BlockNode> node, NbdConnectionThread* connection,
                 int event_fd)
      : node_(std::move(node)), connection_(connection), event_fd_(event_fd) {}
  // Waits until the connection thread has given back every request it has from this queue (it
  // may still write into their buffers); their callbacks do not run.
  ~NbdSharedQueue() override;

  void Submit(IoRequest* request) override;
  void Poll() override;
  int event_fd() const override { return event_fd_; }
  uint32_t in_flight() const override { return submitted_ - completed_; }

  // The connection thread: a request of this queue is finished (its result in its state).
  void Return(IoRequest* request);

 private:
  void HandOver();
  void RunCallbacks();

  std::shared_ptr<const BlockNode> node_;
  NbdConnectionThread* const connection_;
  const int event_fd_;
  RequestList pending_;  // submitted, not yet handed to the connection thread
  RequestList local_;    // refused here; completed by the next Poll()
  RequestStack returned_;
  // Handed to the connection thread and not yet returned, counted down only after Return()'s
  // last use of this queue, so that the destructor knows when the thread is done with it.
  std::atomic<uint32_t> away_{0};
  uint32_t submitted_ = 0;
  uint32_t completed_ = 0;
};

}  // namespace bexd::block
