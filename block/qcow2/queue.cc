// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/queue.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "block/qcow2/engine.h"
#include "block/qcow2/epoll_set.h"
#include "block/request_check.h"

namespace bexd::block::qcow2 {

Qcow2Queue::Qcow2Queue(ImageState* image, std::shared_ptr<const void> owner)
    : image_(image),
      geometry_(image->geometry),
      file_alignment_(std::max<uint32_t>(image->file->request_alignment(), 1)),
      owner_(std::move(owner)) {}

absl::StatusOr<std::unique_ptr<Qcow2Queue>> Qcow2Queue::Create(ImageState* image,
                                                               std::shared_ptr<const void> owner) {
  std::unique_ptr<Qcow2Queue> queue(new Qcow2Queue(image, std::move(owner)));
  absl::Status status = queue->Init();
  if (!status.ok()) return status;
  return queue;
}

absl::Status Qcow2Queue::Init() {
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (event_fd_ < 0 || epoll_fd_ < 0) {
    return absl::ErrnoToStatus(
        errno, fmt::format("node '{}': cannot create a queue's event fds", image_->node_name));
  }
  auto file = image_->file->CreateQueue();
  if (!file.ok()) return file.status();
  file_ = std::move(*file);
  if (image_->backing != nullptr) {
    auto backing = image_->backing->CreateQueue();
    if (!backing.ok()) return backing.status();
    backing_ = std::move(*backing);
  }
  std::vector<int> fds;
  AppendWaitFds(&fds);
  absl::Status watched = WatchForReading(epoll_fd_, fds);
  if (!watched.ok()) {
    return absl::Status(watched.code(), fmt::format("node '{}': {}", image_->node_name,
                                                    std::string(watched.message())));
  }
  subs_ = std::make_unique<SubRequest[]>(kSubRequests);
  for (uint32_t i = 0; i < kSubRequests; ++i) {
    subs_[i].queue = this;
    subs_[i].next = i + 1 < kSubRequests ? &subs_[i + 1] : nullptr;
  }
  free_subs_ = &subs_[0];
  grace_reader_ = image_->grace.Register();
  if (owner_ != nullptr) image_->user_queues.fetch_add(1);
  return absl::OkStatus();
}

Qcow2Queue::~Qcow2Queue() {
  {
    std::unique_lock lock(inbox_mutex_);
    while (at_engine_ > 0) {
      inbox_ready_.wait(lock, [this] { return !inbox_.empty(); });
      while (IoRequest* request = inbox_.PopFront()) {
        --at_engine_;
        delete StateOf(request)->copy;
        StateOf(request)->copy = nullptr;
      }
    }
  }
  // The child queues wait for the child requests still under way.
  file_.reset();
  backing_.reset();
  if (grace_reader_ != nullptr) {
    image_->grace.Unregister(grace_reader_);
    if (owner_ != nullptr) image_->user_queues.fetch_sub(1);
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (event_fd_ >= 0) close(event_fd_);
}

void Qcow2Queue::AppendWaitFds(std::vector<int>* fds) const {
  fds->push_back(event_fd_);
  file_->AppendWaitFds(fds);
  if (backing_) backing_->AppendWaitFds(fds);
}

void Qcow2Queue::SetEdgeTriggeredWaiter() {
  for (IoQueue* child : {file_.get(), backing_.get()}) {
    if (child == nullptr) continue;
    // A child whose fds stay level-triggered here must keep clearing them, or the set would stay
    // readable.
    std::vector<int> fds;
    child->AppendWaitFds(&fds);
    bool all = !fds.empty();
    for (int fd : fds) all = WatchEdgeTriggered(epoll_fd_, fd) && all;
    if (all) child->SetEdgeTriggeredWaiter();
  }
}

void Qcow2Queue::Submit(IoRequest* request) {
  RequestState* state = EmplaceDriverState<RequestState>(request);
  state->queue = this;
  ++in_flight_;
  int error =
      CheckRequest(*request, image_->size.load(std::memory_order_acquire), image_->read_only);
  if (error != 0) return CompleteLater(request, error);
  bool modifies = request->op != IoOp::kRead && request->op != IoOp::kBlockStatus &&
                  request->op != IoOp::kFlush;
  if (modifies && image_->corrupt.load(std::memory_order_acquire)) {
    return CompleteLater(request, -EIO);
  }
  switch (request->op) {
    case IoOp::kRead:
    case IoOp::kWrite:
    case IoOp::kBlockStatus:
      if (request->length == 0) return CompleteLater(request, 0);
      state->grace_slot = GraceDomain::Enter(image_->grace, grace_reader_);
      state->in_grace = true;
      return Continue(request);
    case IoOp::kFlush:
      if (image_->read_only) return CompleteLater(request, 0);
      return Continue(request);
    case IoOp::kDiscard:
    case IoOp::kWriteZeroes:
      if (request->length == 0) return CompleteLater(request, 0);
      ToEngine(request);
      return;
    case IoOp::kAllocate:
      // Not offered (capabilities().allocate).
      return CompleteLater(request, -EOPNOTSUPP);
  }
}

void Qcow2Queue::CompleteLater(IoRequest* request, int64_t result) {
  RequestState* state = StateOf(request);
  state->reply_result = result;
  if (state->in_grace) {
    GraceDomain::Exit(grace_reader_, state->grace_slot);
    state->in_grace = false;
  }
  delete state->copy;
  state->copy = nullptr;
  completed_.PushBack(request);
}

void Qcow2Queue::Fail(IoRequest* request, int64_t error) {
  RequestState* state = StateOf(request);
  if (state->error == 0) state->error = error;
  state->done = request->length;
}

void Qcow2Queue::MaybeComplete(IoRequest* request) {
  RequestState* state = StateOf(request);
  if (state->pending != 0 || state->stalled || state->waits_for_allocation ||
      state->done < request->length) {
    return;
  }
  int64_t result = state->error;
  if (result == 0) {
    result = request->op == IoOp::kBlockStatus ? static_cast<int64_t>(state->status_length)
                                               : static_cast<int64_t>(request->length);
  }
  CompleteLater(request, result);
}

void Qcow2Queue::ToEngine(IoRequest* request) {
  ++StateOf(request)->pending;
  to_engine_.PushBack(request);
  ++to_engine_count_;
}

void Qcow2Queue::ReportCorruption(uint64_t guest_offset) {
  image_->corrupt.store(true, std::memory_order_release);
  image_->engine->ReportCorruption(
      fmt::format("invalid cluster mapping for guest offset {:#x}", guest_offset));
}

bool Qcow2Queue::needs_polling() const {
  return (file_->event_fd() < 0 && file_->in_flight() > 0) ||
         (backing_ && backing_->event_fd() < 0 && backing_->in_flight() > 0);
}

void Qcow2Queue::Reply(IoRequest* request) {
  std::lock_guard lock(inbox_mutex_);
  inbox_.PushBack(request);
  // Signalled under the mutex: once a Poll() has taken a reply, its signal has been written, so
  // the next Poll() clears it for good (see Poll()).
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof(one));
  inbox_ready_.notify_one();
}

void Qcow2Queue::TakeReplies() {
  RequestList replies;
  {
    std::lock_guard lock(inbox_mutex_);
    replies.Splice(inbox_);
  }
  while (IoRequest* request = replies.PopFront()) {
    took_replies_ = true;
    --at_engine_;
    RequestState* state = StateOf(request);
    --state->pending;
    if (state->allocating >= 0) AllocationLanded(request);
    if (state->reply == Reply::kResume) {
      Continue(request);
      continue;
    }
    if (state->reply_result < 0 && state->error == 0) state->error = state->reply_result;
    if (request->op == IoOp::kBlockStatus) state->status_length = 0;
    state->done = request->length;
    MaybeComplete(request);
  }
}

void Qcow2Queue::Poll() {
  // The engine's replies: without any request at the engine (the fast path) this costs neither a
  // syscall nor the inbox mutex. A signal can outlive the reply it announced only until the Poll()
  // after the one that took that reply.
  if (at_engine_ > 0 || took_replies_) {
    uint64_t signals;
    [[maybe_unused]] ssize_t n = read(event_fd_, &signals, sizeof(signals));
    took_replies_ = false;
    TakeReplies();
  }
  for (;;) {
    children_submitted_ = false;
    file_->Poll();
    if (backing_) backing_->Poll();
    ResumeStalled();
    if (to_engine_count_ > 0) {
      at_engine_ += to_engine_count_;
      to_engine_count_ = 0;
      image_->engine->Post(to_engine_);
    }
    while (IoRequest* request = completed_.PopFront()) {
      --in_flight_;
      request->done(request, StateOf(request)->reply_result);
    }
    // What the callbacks submitted must be under way before Poll() returns.
    if (!children_submitted_ && completed_.empty() && to_engine_count_ == 0) break;
  }
}

}  // namespace bexd::block::qcow2
