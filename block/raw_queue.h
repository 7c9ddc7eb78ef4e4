// SPDX-License-Identifier: GPL-2.0-or-later
// One queue thread's I/O context on a RawNode: the child's queue of the same thread, which each
// request goes to in its own storage with its offset shifted, so nothing is allocated or copied.
#pragma once

#include <cstdint>
#include <memory>

#include "block/block_node.h"
#include "block/raw_node.h"
#include "block/request_list.h"

namespace bexd::block {

class RawQueue final : public IoQueue {
 public:
  RawQueue(std::shared_ptr<const RawNode> node, std::unique_ptr<IoQueue> child)
      : node_(std::move(node)), child_(std::move(child)) {}

  void Submit(IoRequest* request) override;
  void Poll() override;
  // The child's: every request that needs waiting for is on the child's queue.
  int event_fd() const override { return child_->event_fd(); }
  void AppendWaitFds(std::vector<int>* fds) const override { child_->AppendWaitFds(fds); }
  uint32_t in_flight() const override { return child_->in_flight() + local_count_; }
  // Data keeps its buffers on the way to the child.
  void UseBuffers(std::span<const struct iovec> regions) override { child_->UseBuffers(regions); }
  // The waiter on event_fd() waits on the child's fd.
  void SetEdgeTriggeredWaiter() override { child_->SetEdgeTriggeredWaiter(); }

 private:
  void CompleteLater(IoRequest* request, int64_t result);

  std::shared_ptr<const RawNode> node_;
  std::unique_ptr<IoQueue> child_;
  RequestList local_;  // refused or done without the child; callbacks run at the next Poll()
  uint32_t local_count_ = 0;
};

}  // namespace bexd::block
