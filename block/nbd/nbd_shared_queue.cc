// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/nbd/nbd_shared_queue.h"

#include <poll.h>
#include <unistd.h>

#include "block/nbd/nbd_request.h"
#include "block/request_check.h"
#include "util/eventfd.h"
#include "util/log.h"

namespace bexd::block {

NbdSharedQueue::~NbdSharedQueue() {
  int waited_ms = 0;
  while (away_.load(std::memory_order_acquire) != 0) {
    struct pollfd ready = {event_fd_, POLLIN, 0};
    poll(&ready, 1, 100);
    waited_ms += 100;
    if (waited_ms % 10000 == 0) {
      log::Warn(
          "node '{}': a closing queue has waited {} s for the NBD server to answer {} "
          "requests",
          node_->node_name(), waited_ms / 1000, away_.load());
    }
  }
  close(event_fd_);
}

void NbdSharedQueue::Submit(IoRequest* request) {
  ++submitted_;
  NbdRequestState* state = EmplaceDriverState<NbdRequestState>(request);
  if (int error = CheckRequest(*request, node_->size(), node_->read_only())) {
    state->result = error;
    local_.PushBack(request);
    return;
  }
  state->origin = this;
  pending_.PushBack(request);
}

void NbdSharedQueue::HandOver() {
  if (pending_.empty()) return;
  bool wake = false;
  while (IoRequest* request = pending_.PopFront()) {
    away_.fetch_add(1, std::memory_order_relaxed);
    wake |= connection_->Hand(request);
  }
  if (wake) connection_->Wake();
}

void NbdSharedQueue::Return(IoRequest* request) {
  if (returned_.Push(request)) util::SignalEventFd(event_fd_);
  away_.fetch_sub(1, std::memory_order_release);
}

void NbdSharedQueue::RunCallbacks() {
  RequestList done;
  done.Splice(local_);
  returned_.TakeAll(&done);
  while (IoRequest* request = done.PopFront()) {
    ++completed_;
    request->done(request, DriverState<NbdRequestState>(request)->result);
  }
}

void NbdSharedQueue::Poll() {
  // The eventfd is cleared before the stack is taken: a request returned after the take finds
  // the stack empty and signals again.
  util::DrainEventFd(event_fd_);
  do {
    HandOver();
    RunCallbacks();
    // Callbacks may have submitted again: hand those over too, and complete what was refused.
  } while (!pending_.empty() || !local_.empty());
}

}  // namespace bexd::block
