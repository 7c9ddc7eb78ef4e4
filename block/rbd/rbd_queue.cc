// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/rbd/rbd_queue.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "block/iov_util.h"
#include "block/rbd/rbd_api.h"
#include "block/request_check.h"
#include "util/rate_limit.h"

namespace bexd::block {
namespace {

struct RbdState : RequestLink {
  RbdQueue* queue = nullptr;
  int64_t result = 0;  // librbd's return value, or the result of a request done here
};

RbdState* State(IoRequest* request) { return DriverState<RbdState>(request); }

// Errors that mean the cluster did not serve the request (an OSD that did not answer within
// rados_osd_op_timeout, this client blocklisted) reach clients as EIO, as from a disk whose path
// failed; a pool quota as ENOSPC. librbd's other errors pass as they are.
int64_t ClientErrno(int64_t result, const RbdNode& node) {
  int64_t mapped = result;
  switch (-result) {
    case ETIMEDOUT:
    case ESHUTDOWN:  // EBLOCKLISTED
    case ENOTCONN:
      mapped = -EIO;
      break;
    case EDQUOT:
      mapped = -ENOSPC;
      break;
    default:
      return result;
  }
  // What an operator can do about it.
  const char* why = "";
  switch (-result) {
    case ETIMEDOUT:
      why =
          ": no answer within rados_osd_op_timeout (an OSD is down or unreachable, or the pool "
          "is full or over its quota, for which librados holds writes back)";
      break;
    case ESHUTDOWN:
      why =
          ": the cluster blocklisted this client (another client broke its lock on the image "
          "while it was unreachable); the export needs a restart to use the image again";
      break;
    default:
      break;
  }
  static log::RateLimit cluster_errors;
  log::Limited(cluster_errors, log::Level::kWarn,
               "node '{}': a request to the Ceph cluster failed ({}{}); reporting {}",
               node.node_name(), std::strerror(static_cast<int>(-result)), why,
               std::strerror(static_cast<int>(-mapped)));
  return mapped;
}

// What the submitter gets for a librbd result (or a result decided here) of the request.
int64_t RequestResult(IoRequest* request, int64_t result, const RbdNode& node) {
  if (result < 0) return ClientErrno(result, node);
  const auto length = static_cast<int64_t>(request->length);
  switch (request->op) {
    case IoOp::kRead:
      // librbd reads holes as zeroes; a short read (an image shrunk by someone else) too.
      if (result < length) ZeroIovFrom(request->iov, request->iovcnt, result);
      return length;
    case IoOp::kWrite:
    case IoOp::kDiscard:
    case IoOp::kWriteZeroes:
    case IoOp::kAllocate:
      return length;
    case IoOp::kFlush:
      return 0;
    case IoOp::kBlockStatus:
      return result;
  }
  return result;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RbdQueue>> RbdQueue::Create(std::shared_ptr<RbdNode> node) {
  int event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd < 0) return absl::ErrnoToStatus(errno, "cannot create the completion eventfd");
  return std::unique_ptr<RbdQueue>(new RbdQueue(std::move(node), event_fd));
}

RbdQueue::~RbdQueue() {
  // librbd cannot cancel a request: wait until each completion has let go of this queue.
  while (in_librbd_.load(std::memory_order_acquire) > 0) {
    struct pollfd wait = {event_fd_, POLLIN, 0};
    ::poll(&wait, 1, 100);
    uint64_t signals;
    [[maybe_unused]] ssize_t n = read(event_fd_, &signals, sizeof(signals));
    RequestList dropped;
    finished_.TakeAll(&dropped);
  }
  close(event_fd_);
}

void RbdQueue::CompleteLater(IoRequest* request, int64_t result) {
  State(request)->result = result;
  local_.PushBack(request);
}

void RbdQueue::Submit(IoRequest* request) {
  RbdState* state = EmplaceDriverState<RbdState>(request);
  state->queue = this;
  ++in_flight_;
  const uint64_t size = node_->size();
  if (int error = CheckRequest(*request, size, node_->read_only())) {
    return CompleteLater(request, error);
  }
  const RbdOptions& options = node_->options();
  switch (request->op) {
    case IoOp::kRead:
    case IoOp::kWrite:  // FUA needs nothing more: a write completes once the OSDs have it
    case IoOp::kWriteZeroes:
      if (request->length == 0) return CompleteLater(request, 0);
      break;
    case IoOp::kFlush:
      if (node_->read_only() || options.cache_no_flush) return CompleteLater(request, 0);
      break;
    case IoOp::kDiscard:
      if (options.discard == DiscardMode::kIgnore || request->length == 0) {
        return CompleteLater(request, 0);
      }
      break;
    case IoOp::kAllocate:
      // RBD images are thin: there is no way to reserve space, as on a block device.
      return CompleteLater(request, 0);
    case IoOp::kBlockStatus:
      // Everything reads as data (QEMU asks librbd only with fast-diff, synchronously).
      request->status_data = true;
      return CompleteLater(
          request, request->offset >= size
                       ? 0
                       : static_cast<int64_t>(std::min(request->length, size - request->offset)));
  }
  if (!StartLibrbd(request)) local_.PushBack(request);
}

bool RbdQueue::StartLibrbd(IoRequest* request) {
  RbdState* state = State(request);
  rbd_completion_t completion;
  int r = Rbd().rbd_aio_create_completion(request, &RbdQueue::OnComplete, &completion);
  if (r < 0) {
    state->result = r;
    return false;
  }
  in_librbd_.fetch_add(1, std::memory_order_relaxed);
  rbd_image_t image = node_->image();
  switch (request->op) {
    case IoOp::kRead:
      r = Rbd().rbd_aio_readv(image, request->iov, request->iovcnt, request->offset, completion);
      break;
    case IoOp::kWrite:
      r = Rbd().rbd_aio_writev(image, request->iov, request->iovcnt, request->offset, completion);
      break;
    case IoOp::kFlush:
      r = Rbd().rbd_aio_flush(image, completion);
      break;
    case IoOp::kDiscard:
      r = Rbd().rbd_aio_discard(image, request->offset, request->length, completion);
      break;
    case IoOp::kWriteZeroes: {
      // As QEMU: unless the client allows unmapping (and discard=unmap passes that on), the
      // range stays allocated.
      const bool may_unmap =
          (request->flags & kIoMayUnmap) && node_->options().discard == DiscardMode::kUnmap;
      r = Rbd().rbd_aio_write_zeroes(image, request->offset, request->length, completion,
                                     may_unmap ? 0 : RBD_WRITE_ZEROES_FLAG_THICK_PROVISION, 0);
      break;
    }
    default:
      r = -EINVAL;  // completed in Submit
      break;
  }
  if (r < 0) {
    Rbd().rbd_aio_release(completion);
    in_librbd_.fetch_sub(1, std::memory_order_relaxed);
    state->result = r;
    return false;
  }
  return true;
}

void RbdQueue::OnComplete(rbd_completion_t completion, void* arg) {
  auto* request = static_cast<IoRequest*>(arg);
  RbdState* state = State(request);
  RbdQueue* queue = state->queue;
  state->result = Rbd().rbd_aio_get_return_value(completion);
  Rbd().rbd_aio_release(completion);
  // From here on the request belongs to the queue thread again.
  if (queue->finished_.Push(request)) {
    // Poll() drains the eventfd before taking the stack, so one write per empty-to-non-empty
    // change suffices; one that lands after the take only causes a spurious Poll().
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(queue->event_fd_, &one, sizeof(one));
  }
  queue->in_librbd_.fetch_sub(1, std::memory_order_release);
}

void RbdQueue::Poll() {
  // Always clear the eventfd: a wake-up for requests already taken may land late, and a
  // level-triggered epoll would otherwise keep waking the thread.
  uint64_t signals;
  [[maybe_unused]] ssize_t n = read(event_fd_, &signals, sizeof(signals));
  if (in_flight_ == 0) return;
  do {
    RequestList ready;
    finished_.TakeAll(&ready);
    ready.Splice(local_);
    while (IoRequest* request = ready.PopFront()) {
      --in_flight_;
      request->done(request, RequestResult(request, State(request)->result, *node_));
    }
    // Callbacks may have submitted requests that completed here at once: run them too, since
    // nothing would wake the thread for them.
  } while (!local_.empty());
}

}  // namespace bexd::block
