#include "block/file_queue.h"

#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "block/file_worker.h"
#include "block/request_check.h"

namespace bexd::block {
namespace {

FileRequestState* State(IoRequest* request) { return DriverState<FileRequestState>(request); }

IoRequest* RequestOf(struct iocb* iocb) { return static_cast<IoRequest*>(iocb->data); }

}  // namespace

absl::StatusOr<std::unique_ptr<FileQueue>> FileQueue::Create(std::shared_ptr<FileNode> node) {
  int event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd < 0) return absl::ErrnoToStatus(errno, "cannot create the completion eventfd");
  std::unique_ptr<FileQueue> queue(new FileQueue(node, event_fd));
  bool native = node->options().aio == AioMode::kNative;
  if (native) {
    int error = io_setup(kAioDepth, &queue->aio_);
    if (error != 0) {
      queue->aio_ = nullptr;
      return absl::ErrnoToStatus(-error,
                                 fmt::format("cannot create a libaio context for {} requests (see "
                                             "/proc/sys/fs/aio-max-nr)",
                                             kAioDepth));
    }
  }
  auto workers = WorkerPool::Start(native ? kHelperThreadsForNative : kThreadsPerQueue, event_fd,
                                   [node] { return std::make_unique<FileWorker>(node); });
  if (!workers.ok()) return workers.status();
  queue->workers_ = std::move(*workers);
  return queue;
}

FileQueue::~FileQueue() {
  workers_.reset();
  // io_destroy waits for every request still in the kernel, so no buffer is touched afterwards.
  if (aio_ != nullptr) io_destroy(aio_);
  close(event_fd_);
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
  state->done = 0;
  ++in_flight_;
  int error = CheckRequest(*request, node_->size(), node_->read_only());
  if (error != 0) return CompleteLater(request, error);
  const FileOptions& options = node_->options();
  switch (request->op) {
    case IoOp::kRead:
    case IoOp::kWrite:
      if (request->length == 0) return CompleteLater(request, 0);
      if (PrepareAio(request)) return aio_waiting_.PushBack(request);
      return ToWorkers(request);
    case IoOp::kFlush:
      if (node_->read_only() || options.cache_no_flush) return CompleteLater(request, 0);
      if (PrepareAio(request)) return aio_waiting_.PushBack(request);
      return ToWorkers(request);
    case IoOp::kDiscard:
      if (options.discard == DiscardMode::kIgnore || request->length == 0) {
        return CompleteLater(request, static_cast<int64_t>(request->length));
      }
      return ToWorkers(request);
    case IoOp::kWriteZeroes:
      if (request->length == 0) return CompleteLater(request, 0);
      return ToWorkers(request);
    case IoOp::kAllocate:
      if (request->length == 0) return CompleteLater(request, 0);
      return ToWorkers(request);
    case IoOp::kBlockStatus:
      return ToWorkers(request);
  }
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
  while (!aio_waiting_.empty() && in_kernel_ < kAioDepth) {
    uint32_t count = 0;
    for (IoRequest* request = aio_waiting_.front();
         request != nullptr && count < kAioDepth - in_kernel_;
         request = RequestList::Next(request)) {
      batch_[count++] = &State(request)->iocb;
    }
    int submitted = io_submit(aio_, count, batch_);
    if (submitted > 0) {
      for (int i = 0; i < submitted; ++i) aio_waiting_.PopFront();
      in_kernel_ += static_cast<uint32_t>(submitted);
      continue;
    }
    if (submitted == -EAGAIN && in_kernel_ > 0) break;  // the ring is full; retry after reaping
    // The kernel refused the first iocb (or has no room at all): run it synchronously instead,
    // where any error it has is reported for that request alone.
    ToWorkers(aio_waiting_.PopFront());
  }
}

void FileQueue::ReapAio(RequestList* finished) {
  static const struct timespec kNoWait = {0, 0};
  while (in_kernel_ > 0) {
    int count = io_getevents(aio_, 0, kAioDepth, events_, const_cast<struct timespec*>(&kNoWait));
    if (count <= 0) return;
    in_kernel_ -= static_cast<uint32_t>(count);
    for (int i = 0; i < count; ++i) {
      IoRequest* request = RequestOf(events_[i].obj);
      FileRequestState* state = State(request);
      auto result = static_cast<long>(events_[i].res);
      if (result < 0 || request->op == IoOp::kFlush ||
          static_cast<uint64_t>(result) == request->length) {
        state->result = node_->KernelResult(*request, result);
      } else {
        // A short read (end of file) or write: a worker finishes or fails the rest.
        state->done = static_cast<uint64_t>(result);
        ToWorkers(request);
        continue;
      }
      finished->PushBack(request);
    }
    if (count < static_cast<int>(kAioDepth)) return;
  }
}

void FileQueue::DispatchJobs() {
  if (jobs_count_ == 0) return;
  in_workers_ += jobs_count_;
  workers_->Dispatch(jobs_, jobs_count_);
  jobs_count_ = 0;
}

void FileQueue::Poll() {
  // Always clear the eventfd: a signal for a completion already reaped may land late, and a
  // level-triggered epoll would otherwise keep waking the thread.
  uint64_t signals;
  [[maybe_unused]] ssize_t n = read(event_fd_, &signals, sizeof(signals));
  if (in_flight_ == 0) return;
  SubmitAio();
  DispatchJobs();
  RequestList finished;
  ReapAio(&finished);
  if (in_workers_ > 0) in_workers_ -= workers_->TakeFinished(&finished);
  finished.Splice(local_);
  while (IoRequest* request = finished.PopFront()) {
    --in_flight_;
    request->done(request, State(request)->result);
  }
  // What the callbacks submitted, and partial completions handed to the workers.
  SubmitAio();
  DispatchJobs();
  if (!local_.empty()) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t written = write(event_fd_, &one, sizeof(one));
  }
}

}  // namespace bexd::block
