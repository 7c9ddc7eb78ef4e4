// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/vhost_user/vring_queue.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fuse/request_state.h"
#include "util/eventfd.h"
#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::exports {
namespace {

// Iovecs one slot holds. A chain needs one per descriptor plus one per region boundary its
// buffers cross; the request core never uses more than fuse::kMaxDataIovecs data iovecs, so
// chains longer than twice that (plus headers) are not requests it could serve.
int IovecsPerSlot(uint32_t queue_size) {
  return static_cast<int>(std::min<uint32_t>(queue_size, 2 * fuse::kMaxDataIovecs)) + 8;
}

void Notify(int fd) {
  if (fd >= 0) util::SignalEventFd(fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<VringQueue>> VringQueue::Create(
    std::shared_ptr<fuse::Session> session, QueueThreadOptions options) {
  std::unique_ptr<VringQueue> queue(new VringQueue());
  absl::StatusOr<std::unique_ptr<QueueThread>> thread =
      QueueThread::Start(std::move(session), std::move(options));
  if (!thread.ok()) return thread.status();
  queue->thread_ = std::move(*thread);
  return queue;
}

VringQueue::~VringQueue() { thread_.reset(); }

absl::Status VringQueue::Start(const VringRun& run) {
  if (thread_->running()) {
    return absl::FailedPreconditionError(fmt::format("{} is already running", thread_->label()));
  }
  run_ = run;
  return thread_->BeginRun(this, run.layout.size);
}

uint16_t VringQueue::Stop() {
  thread_->EndRun();
  return ring_.next_avail();
}

absl::Status VringQueue::Attach(QueueThread& thread) {
  if (absl::Status status = ring_.Start(run_.layout, run_.memory); !status.ok()) return status;
  // Each write to an eventfd wakes an edge-triggered waiter, however high its counter: such a
  // kick fd is never read. Anything else the frontend passed is watched level-triggered and read
  // on every wake-up: a socket left unread fills up, and a kick it then refuses wakes nobody.
  kick_is_eventfd_ = util::IsEventFd(run_.kick_fd);
  const uint32_t kick_events = kick_is_eventfd_ ? EPOLLIN | EPOLLET : EPOLLIN;
  if (absl::Status status = thread.loop().Watch(run_.kick_fd, kick_events, kKickTag);
      !status.ok()) {
    return absl::InvalidArgumentError(fmt::format("kick fd: {}", std::string(status.message())));
  }
  if (slot_count_ != thread.slot_count()) {
    slot_count_ = thread.slot_count();
    iov_per_slot_ = IovecsPerSlot(slot_count_);
    // Left uninitialized: a page is touched only once a chain that long arrives.
    iovs_.reset(new struct iovec[static_cast<size_t>(slot_count_) * iov_per_slot_]);
    heads_ = std::make_unique<uint16_t[]>(slot_count_);
  }
  broken_reported_ = false;
  kick_lost_ = false;
  return absl::OkStatus();
}

QueueTransport::Fetched VringQueue::Fetch(QueueThread& thread, bool /*idle*/) {
  CheckMemory();
  if (kick_lost_ || ring_.broken()) return Fetched::kEmpty;
  ring_.DisableKick();
  while (thread.has_free_slot()) {
    const uint32_t slot = thread.next_slot();
    Chain chain;
    const Virtqueue::PopResult result =
        ring_.Pop(&iovs_[static_cast<size_t>(slot) * iov_per_slot_], iov_per_slot_, &chain);
    if (result != Virtqueue::PopResult::kChain) return Fetched::kEmpty;
    heads_[slot] = chain.head;
    fuse::Request& request = thread.request(slot);
    request.in = chain.iov;
    request.in_count = chain.readable;
    request.out = chain.iov + chain.readable;
    request.out_count = chain.writable;
    thread.DispatchNext();
  }
  return Fetched::kMore;  // out of slots: take the rest once completions free some
}

bool VringQueue::PrepareToSleep(QueueThread& thread) {
  // Sleep only when the ring is empty as seen after re-arming kicks; with every slot busy (or a
  // broken ring) only completions can make progress, and kicks are not wanted.
  if (!thread.has_free_slot() || ring_.broken() || kick_lost_) return true;
  return ring_.EnableKick();
}

void VringQueue::Reply(uint32_t slot, int64_t result) {
  if (result < 0) {
    // Not a FUSE request at all: nothing can be answered on this chain.
    ring_.MarkBroken("a chain does not hold a well-formed FUSE request");
  } else {
    ring_.PushUsed(heads_[slot], static_cast<uint32_t>(result));
  }
}

void VringQueue::Flush() {
  CheckMemory();
  if (ring_.FlushUsed()) Notify(run_.call_fd);
  ReportBroken();
}

void VringQueue::CheckMemory() {
  // Also over an earlier reason: the zeroes read from a lost page make the ring look broken too.
  if (run_.memory->faulted()) {
    ring_.MarkBroken("its guest memory could not be read (SIGBUS: a page has no backing)");
  }
}

void VringQueue::ReportBroken() {
  if (broken_reported_ || !ring_.broken()) return;
  broken_reported_ = true;
  static log::RateLimit limit;
  log::Limited(limit, log::Level::kError,
               "{}: the guest broke the virtqueue ({}); it is stopped until the frontend restarts "
               "it",
               thread_->label(), ring_.broken_reason());
  Notify(run_.err_fd);
}

void VringQueue::LoseKick(const char* why) {
  // Level-triggered epoll would report a hung-up fd on every wait: the thread would spin.
  thread_->loop().Unwatch(run_.kick_fd);
  kick_lost_ = true;
  static log::RateLimit limit;
  log::Limited(limit, log::Level::kWarn,
               "{}: the kick fd {}; the ring is stopped until the frontend sends a new one",
               thread_->label(), why);
}

void VringQueue::OnEvent(uint64_t tag, uint32_t events) {
  if (tag != kKickTag || kick_lost_) return;
  // The frontend may pass any fd as the kick fd (a pipe, a socket) and close its other end.
  if (events & (EPOLLHUP | EPOLLERR)) {
    LoseKick("hung up");
    return;
  }
  if (kick_is_eventfd_) return;
  uint64_t count;
  // Only this thread reads the kick fd, and only once it is readable.
  const ssize_t r = ::read(run_.kick_fd, &count, sizeof(count));
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
    LoseKick(r == 0 ? "reached its end" : "cannot be read");
  }
}

}  // namespace bexd::exports
