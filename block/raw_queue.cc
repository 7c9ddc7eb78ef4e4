// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/raw_queue.h"

#include <algorithm>

#include "block/request_check.h"

namespace bexd::block {
namespace {

// Only for requests that complete here; a request handed to the child belongs to the child's
// driver state.
struct RawState : RequestLink {
  int64_t result = 0;
};

}  // namespace

void RawQueue::CompleteLater(IoRequest* request, int64_t result) {
  EmplaceDriverState<RawState>(request)->result = result;
  local_.PushBack(request);
  ++local_count_;
}

void RawQueue::Submit(IoRequest* request) {
  const uint64_t size = node_->size();
  if (int error = CheckRequest(*request, size, node_->read_only())) {
    CompleteLater(request, error);
    return;
  }
  switch (request->op) {
    case IoOp::kBlockStatus:
      // The child knows nothing of this node's end: cap the extent there.
      if (request->offset >= size) {
        CompleteLater(request, 0);
        return;
      }
      request->length = std::min(request->length, size - request->offset);
      break;
    case IoOp::kDiscard:
      // QEMU's discard=ignore: a hint this node drops.
      if (node_->discard() == DiscardMode::kIgnore) {
        CompleteLater(request, static_cast<int64_t>(request->length));
        return;
      }
      break;
    case IoOp::kWriteZeroes:
      if (node_->discard() == DiscardMode::kIgnore) request->flags &= ~kIoMayUnmap;
      break;
    default:
      break;
  }
  // CheckRequest bounded the range by size(), which ends within the child past the offset.
  request->offset += node_->offset();
  child_->Submit(request);
}

void RawQueue::Poll() {
  bool completed_here;
  do {
    child_->Poll();
    completed_here = !local_.empty();
    RequestList ready;
    ready.Splice(local_);
    while (IoRequest* request = ready.PopFront()) {
      --local_count_;
      request->done(request, DriverState<RawState>(request)->result);
    }
    // Those callbacks may have submitted again: the next round gets the child's share under
    // way and completes what was refused here.
  } while (completed_here);
}

}  // namespace bexd::block
