// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/file_queue.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "block/file_worker.h"
#include "block/request_check.h"
#include "util/eventfd.h"
#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::block {
namespace {

FileRequestState* State(IoRequest* request) { return DriverState<FileRequestState>(request); }

IoRequest* RequestOf(struct iocb* iocb) { return static_cast<IoRequest*>(iocb->data); }

// Whether `next` could merge with `last` in the kernel: the same operation on the bytes that
// follow.
bool Continues(const IoRequest& last, const IoRequest& next) {
  return last.op == next.op && HasData(next.op) && last.offset + last.length == next.offset;
}

// Operations that may write past the file's end and so extend it: allocation is fallocate mode
// 0, and write-zeroes falls back to writing zeroes where the file system cannot zero a range.
bool CanExtendFile(IoOp op) {
  return op == IoOp::kWrite || op == IoOp::kWriteZeroes || op == IoOp::kAllocate;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileQueue>> FileQueue::Create(std::shared_ptr<FileNode> node) {
  int event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd < 0) return absl::ErrnoToStatus(errno, "cannot create the completion eventfd");
  std::unique_ptr<FileQueue> queue(new FileQueue(node, event_fd));
  const AioMode aio = node->options().aio;
  if (aio == AioMode::kIoUring) {
    auto ring = UringRing::Create(kAioDepth, event_fd);
    if (!ring.ok()) return ring.status();  // the queue's destructor closes event_fd
    queue->uring_ = *std::move(ring);
  }
  if (aio == AioMode::kNative) {
    auto context = AioContext::ForThisThread();
    if (!context.ok()) return context.status();
    queue->aio_ = *std::move(context);
  }
  return queue;
}

FileQueue::~FileQueue() {
  workers_.reset();
  uring_.reset();  // waits for what the kernel took
  if (aio_ != nullptr) WaitForLibaio();
  close(event_fd_);
}

void FileQueue::WaitForLibaio() {
  aio_->ForgetRoomWaiter(event_fd_);
  // Every completion of ours signals event_fd_, also one another queue takes and hands over, so
  // draining it before taking events cannot miss one.
  while (in_kernel_ > 0) {
    util::DrainEventFd(event_fd_);
    const int count = TakeLibaioEvents();
    while (reaped_.PopFront() != nullptr) --in_kernel_;
    if (in_kernel_ > 0 && count <= 0) {
      struct pollfd pfd = {event_fd_, POLLIN, 0};
      poll(&pfd, 1, -1);
    }
  }
}

void FileQueue::CompleteLater(IoRequest* request, int64_t result) {
  State(request)->result = result;
  local_.PushBack(request);
}

void FileQueue::ToWorkers(IoRequest* request) {
  jobs_.PushBack(request);
  ++jobs_count_;
}

void FileQueue::Submit(IoRequest* request) {
  FileRequestState* state = EmplaceDriverState<FileRequestState>(request);
  state->queue = this;
  state->done = 0;
  ++in_flight_;
  int error = CheckRequest(*request, node_->size(), node_->read_only());
  if (error != 0) return CompleteLater(request, error);
  const FileOptions& options = node_->options();
  switch (request->op) {
    case IoOp::kRead:
    case IoOp::kWrite:
      if (request->length == 0) return CompleteLater(request, 0);
      if (ToAsync(request)) return;
      return ToWorkers(request);
    case IoOp::kFlush:
      if (node_->read_only() || options.cache_no_flush) return CompleteLater(request, 0);
      if (ToAsync(request)) return;
      return ToWorkers(request);
    case IoOp::kDiscard:
      if (options.discard == DiscardMode::kIgnore || request->length == 0) {
        return CompleteLater(request, static_cast<int64_t>(request->length));
      }
      if (ToAsync(request)) return;
      return ToWorkers(request);
    case IoOp::kWriteZeroes:
      if (request->length == 0) return CompleteLater(request, 0);
      if (ToAsync(request)) return;
      return ToWorkers(request);
    case IoOp::kAllocate:
      if (request->length == 0) return CompleteLater(request, 0);
      return ToWorkers(request);
    case IoOp::kBlockStatus:
      return ToWorkers(request);
  }
}

bool FileQueue::ToAsync(IoRequest* request) {
  if (uring_ != nullptr) {
    if (!UringRing::Carries(*request, *node_)) return false;
    if (HasData(request->op) &&
        !node_->IsAligned(request->offset, request->length, request->iov, request->iovcnt)) {
      return false;
    }
  } else if (!PrepareAio(request)) {
    return false;
  }
  // The kernel merges a request only into the one submitted just before it in the same batch, so
  // holding back a batch for a request that does not continue it gains no merge, only delay: with
  // random reads at QD16 the requests read together then went to the disk together, came back
  // together and stayed one convoy, with half the disk's queue idle.
  if (const IoRequest* last = aio_waiting_.back(); last != nullptr && !Continues(*last, *request)) {
    SubmitAio();
  }
  aio_waiting_.PushBack(request);
  if (uring_ == nullptr && ++aio_waiting_count_ == node_->options().aio_max_batch) SubmitAio();
  return true;
}

bool FileQueue::PrepareAio(IoRequest* request) {
  if (aio_ == nullptr) return false;
  struct iocb* iocb = &State(request)->iocb;
  int fd = node_->fd();
  switch (request->op) {
    case IoOp::kRead:
    case IoOp::kWrite:
      if (!node_->IsAligned(request->offset, request->length, request->iov, request->iovcnt)) {
        return false;
      }
      if (request->op == IoOp::kRead) {
        io_prep_preadv(iocb, fd, request->iov, request->iovcnt,
                       static_cast<long long>(request->offset));
      } else {
        io_prep_pwritev(iocb, fd, request->iov, request->iovcnt,
                        static_cast<long long>(request->offset));
        if (request->flags & kIoFua) iocb->aio_rw_flags = RWF_DSYNC;
      }
      break;
    case IoOp::kFlush:
      if (!node_->aio_fdsync()) return false;
      io_prep_fdsync(iocb, fd);
      break;
    default:
      return false;
  }
  io_set_eventfd(iocb, event_fd_);
  iocb->data = request;
  return true;
}

void FileQueue::SubmitAio() {
  if (uring_ != nullptr) return SubmitRing();
  if (aio_ != nullptr) SubmitLibaio();
}

void FileQueue::SubmitRing() {
  while (!aio_waiting_.empty() && in_kernel_ < kAioDepth &&
         uring_->Prepare(aio_waiting_.front(), *node_)) {
    aio_waiting_.PopFront();
    ++in_kernel_;
  }
  int submitted = uring_->Submit();
  if (submitted >= 0) return;
  // The prepared SQEs stay in the ring and go with the next Submit(). EAGAIN and EBUSY pass once
  // the kernel completes something; with nothing of ours in flight, no completion would wake this
  // thread, so wake it for a retry.
  static log::RateLimit limit;
  log::Limited(limit, log::Level::kWarn, "node '{}': io_uring submission failed: {}",
               node_->node_name(), std::strerror(-submitted));
  util::SignalEventFd(event_fd_);
}

void FileQueue::SubmitLibaio() {
  const uint32_t max_batch = node_->options().aio_max_batch;
  while (!aio_waiting_.empty()) {
    const uint32_t room = aio_->room();
    if (room == 0) return aio_->WaitForRoom(event_fd_);
    const uint32_t limit = max_batch != 0 ? std::min(room, max_batch) : room;
    uint32_t count = 0;
    for (IoRequest* request = aio_waiting_.front(); request != nullptr && count < limit;
         request = RequestList::Next(request)) {
      batch_[count++] = &State(request)->iocb;
    }
    int submitted = io_submit(aio_->handle(), count, batch_);
    if (submitted > 0) {
      for (int i = 0; i < submitted; ++i) aio_waiting_.PopFront();
      aio_waiting_count_ -= static_cast<uint32_t>(submitted);
      in_kernel_ += static_cast<uint32_t>(submitted);
      aio_->Submitted(static_cast<uint32_t>(submitted));
      continue;
    }
    // The ring is full after all; retry when the thread's queues have taken some events.
    if (submitted == -EAGAIN && aio_->in_kernel() > 0) return aio_->WaitForRoom(event_fd_);
    // The kernel refused the first iocb (or has no room at all): run it synchronously instead,
    // where any error it has is reported for that request alone.
    IoRequest* refused = aio_waiting_.PopFront();
    --aio_waiting_count_;
    if (submitted == -EINVAL && refused->op == IoOp::kFlush) node_->NoteAioFdsyncRefused();
    ToWorkers(refused);
  }
}

void FileQueue::AsyncDone(IoRequest* request, int64_t result, RequestList* finished) {
  FileRequestState* state = State(request);
  const bool fallocate = request->op == IoOp::kDiscard || request->op == IoOp::kWriteZeroes;
  // The ring's fallocate where the filesystem lacks the mode, and the rare EAGAIN/EINTR the
  // kernel leaves to the submitter: the worker's path has every fallback and retries.
  if (result == -EAGAIN || result == -EINTR || (fallocate && FallocateNotSupported(-result))) {
    return ToWorkers(request);
  }
  if (result >= 0 && HasData(request->op) && static_cast<uint64_t>(result) != request->length) {
    // A short read (end of file) or write: a worker finishes or fails the rest.
    state->done = static_cast<uint64_t>(result);
    return ToWorkers(request);
  }
  if (result >= 0 && fallocate) result = static_cast<int64_t>(request->length);
  state->result = node_->KernelResult(*request, result);
  finished->PushBack(request);
}

void FileQueue::ReapAio(RequestList* finished) {
  if (uring_ != nullptr) {
    in_kernel_ -= uring_->Reap([this, finished](IoRequest* request, int64_t result) {
      AsyncDone(request, result, finished);
    });
    return;
  }
  if (aio_ != nullptr) ReapLibaio(finished);
}

int FileQueue::TakeLibaioEvents() {
  const int count = aio_->Take(events_, kAioDepth);
  for (int i = 0; i < count; ++i) {
    IoRequest* request = RequestOf(events_[i].obj);
    const int64_t result = static_cast<long>(events_[i].res);
    FileQueue* owner = State(request)->queue;
    if (owner != this) {
      owner->HandOver(request, result);
      continue;
    }
    State(request)->result = result;
    reaped_.PushBack(request);
  }
  return count;
}

void FileQueue::ReapLibaio(RequestList* finished) {
  // A full batch may leave more in the ring. With nothing of ours in the kernel, the events there
  // are other queues', whose own Poll() takes them.
  if (in_kernel_ > 0) {
    while (TakeLibaioEvents() == static_cast<int>(kAioDepth)) {
    }
  }
  while (IoRequest* request = reaped_.PopFront()) {
    --in_kernel_;
    AsyncDone(request, State(request)->result, finished);
  }
}

void FileQueue::HandOver(IoRequest* request, int64_t result) {
  State(request)->result = result;
  reaped_.PushBack(request);
  // The kernel's signal for this event may have woken the thread already, with this queue
  // polled before the one that took the event.
  util::SignalEventFd(event_fd_);
}

bool FileQueue::StartWorkers() {
  const int threads =
      node_->options().aio != AioMode::kThreads ? kHelperThreadsForAsync : kThreadsPerQueue;
  std::shared_ptr<FileNode> node = node_;
  auto workers =
      WorkerPool::Start(threads, event_fd_, [node] { return std::make_unique<FileWorker>(node); });
  if (!workers.ok()) {
    static log::RateLimit limit;
    log::Limited(limit, log::Level::kError, "node '{}': cannot start a queue's worker threads: {}",
                 node_->node_name(), std::string(workers.status().message()));
    return false;
  }
  workers_ = *std::move(workers);
  return true;
}

void FileQueue::DispatchJobs() {
  if (jobs_count_ == 0) return;
  // Started with the first job, not with the queue: many queues never need one (a qcow2 chain
  // has a file queue per image on every thread, mostly reading aligned clusters).
  if (workers_ == nullptr && !StartWorkers()) {
    while (IoRequest* request = jobs_.PopFront()) CompleteLater(request, -EIO);
    jobs_count_ = 0;
    return;
  }
  in_workers_ += jobs_count_;
  workers_->Dispatch(jobs_, jobs_count_);
  jobs_count_ = 0;
}

void FileQueue::Poll() {
  // For a level-triggered waiter, clear the eventfd before reaping: a signal for a completion
  // already reaped may land late, and the waiter would otherwise keep waking. Cleared after
  // reaping, it could swallow the signal of a completion that lands in between.
  if (!edge_triggered_waiter_) util::DrainEventFd(event_fd_);
  if (in_flight_ == 0) return;
  SubmitAio();
  DispatchJobs();
  RequestList finished;
  ReapAio(&finished);
  if (in_workers_ > 0) in_workers_ -= workers_->TakeFinished(&finished);
  finished.Splice(local_);
  while (IoRequest* request = finished.PopFront()) {
    --in_flight_;
    const int64_t result = State(request)->result;
    if (result >= 0 && CanExtendFile(request->op) &&
        request->offset + request->length > node_->size()) {
      node_->TrimPastEnd(request->offset + request->length);
    }
    request->done(request, result);
  }
  // What the callbacks submitted, and partial completions handed to the workers.
  SubmitAio();
  DispatchJobs();
  if (!local_.empty()) util::SignalEventFd(event_fd_);
}

}  // namespace bexd::block
