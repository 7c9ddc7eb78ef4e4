#include "export/vhost_user_queue_worker.h"

#include <absl/strings/str_format.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "export/queue_cpus.h"
#include "fuse/request_state.h"
#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::exp {
namespace {

constexpr uint64_t kKickTag = 1;
constexpr uint64_t kIoTag = 2;

// Iovecs one slot holds. A chain needs one per descriptor plus one per region boundary its
// buffers cross; the request core never uses more than fuse::kMaxDataIovecs data iovecs, so
// chains longer than twice that (plus headers) are not requests it could serve.
int IovecsPerSlot(uint32_t queue_size) {
  return static_cast<int>(std::min<uint32_t>(queue_size, 2 * fuse::kMaxDataIovecs)) + 8;
}

void Notify(int fd) {
  if (fd < 0) return;
  const uint64_t one = 1;
  // EAGAIN means the counter is saturated: the fd is readable anyway.
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
}

}  // namespace

absl::StatusOr<std::unique_ptr<VhostUserQueueWorker>> VhostUserQueueWorker::Create(
    std::shared_ptr<fuse::Session> session, std::string name, const std::string& thread_name,
    int cpu) {
  std::unique_ptr<VhostUserQueueWorker> worker(new VhostUserQueueWorker(std::move(name)));
  worker->thread_ =
      std::thread(&VhostUserQueueWorker::ThreadMain, worker.get(), std::move(session), cpu);
  pthread_setname_np(worker->thread_.native_handle(), thread_name.substr(0, 15).c_str());
  std::unique_lock lock(worker->mutex_);
  worker->changed_.wait(lock, [&] { return worker->ready_; });
  if (!worker->setup_error_.ok()) {
    absl::Status error = worker->setup_error_;
    lock.unlock();
    worker->thread_.join();
    return error;
  }
  return worker;
}

VhostUserQueueWorker::~VhostUserQueueWorker() {
  if (!thread_.joinable()) return;
  Stop();
  {
    std::lock_guard lock(mutex_);
    state_ = State::kExit;
  }
  changed_.notify_all();
  thread_.join();
}

void VhostUserQueueWorker::ThreadMain(std::shared_ptr<fuse::Session> session, int cpu) {
  absl::Status setup = cpu >= 0 ? PinCurrentThread(cpu) : absl::OkStatus();
  std::unique_ptr<block::IoQueue> io;
  if (setup.ok()) {
    absl::StatusOr<std::unique_ptr<block::IoQueue>> created = session->node().CreateQueue();
    if (created.ok()) {
      io = std::move(*created);
    } else {
      setup = absl::Status(
          created.status().code(),
          absl::StrFormat("cannot create an I/O queue: %s", created.status().message()));
    }
  }
  {
    std::lock_guard lock(mutex_);
    if (setup.ok()) {
      queue_ =
          std::make_unique<fuse::Queue>(std::move(session), std::move(io), &OnRequestDone, this);
    } else {
      setup_error_ = absl::Status(setup.code(), absl::StrFormat("%s: %s", name_, setup.message()));
    }
    ready_ = true;
  }
  changed_.notify_all();
  if (!setup.ok()) return;

  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return state_ != State::kIdle; });
    if (state_ == State::kExit) return;
    lock.unlock();
    Serve();
    lock.lock();
    state_ = State::kIdle;
    loop_.reset();
    changed_.notify_all();
  }
}

absl::Status VhostUserQueueWorker::Start(const VringRun& run) {
  std::unique_lock lock(mutex_);
  if (state_ != State::kIdle) return absl::FailedPreconditionError(name_ + " is already running");
  const char* error = nullptr;
  if (!ring_.Start(run.layout, run.memory, &error)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", name_, error));
  }
  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  if (!loop.ok()) return loop.status();
  if (absl::Status s = (*loop)->Watch(run.kick_fd, EPOLLIN, kKickTag); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: kick fd: %s", name_, s.message()));
  }
  int io_fd = queue_->io_queue().event_fd();
  if (io_fd >= 0) {
    if (absl::Status s = (*loop)->Watch(io_fd, EPOLLIN, kIoTag); !s.ok()) return s;
  }
  ResizeSlots(run.layout.size);
  run_ = run;
  broken_reported_ = false;
  kick_lost_ = false;
  loop_ = std::move(*loop);
  state_ = State::kRunning;
  changed_.notify_all();
  return absl::OkStatus();
}

uint16_t VhostUserQueueWorker::Stop() {
  std::unique_lock lock(mutex_);
  if (state_ == State::kRunning) {
    loop_->RequestStop();
    changed_.wait(lock, [&] { return state_ != State::kRunning; });
  }
  return ring_.next_avail();
}

bool VhostUserQueueWorker::running() const {
  std::lock_guard lock(mutex_);
  return state_ == State::kRunning;
}

fuse::QueueStatsSnapshot VhostUserQueueWorker::Stats() const {
  return fuse::QueueStatsSnapshot::Of(queue_->stats());
}

void VhostUserQueueWorker::ResizeSlots(uint32_t size) {
  if (size == slot_count_) {
    free_count_ = size;
    for (uint32_t i = 0; i < size; ++i) free_slots_[i] = static_cast<uint16_t>(i);
    return;
  }
  slot_count_ = size;
  iov_per_slot_ = IovecsPerSlot(size);
  slots_ = std::make_unique<Slot[]>(size);
  // Left uninitialized: a page is touched only once a chain that long arrives.
  iovs_.reset(new struct iovec[static_cast<size_t>(size) * iov_per_slot_]);
  free_slots_ = std::make_unique<uint16_t[]>(size);
  free_count_ = size;
  for (uint32_t i = 0; i < size; ++i) {
    slots_[i].request.transport = &slots_[i];
    free_slots_[i] = static_cast<uint16_t>(i);
  }
}

void VhostUserQueueWorker::OnRequestDone(fuse::Request* request, int64_t result, void* context) {
  auto* self = static_cast<VhostUserQueueWorker*>(context);
  auto* slot = static_cast<Slot*>(request->transport);
  if (result < 0) {
    // Not a FUSE request at all: nothing can be answered on this chain.
    self->ring_.MarkBroken("a chain does not hold a well-formed FUSE request");
  } else {
    self->ring_.PushUsed(slot->head, static_cast<uint32_t>(result));
  }
  self->free_slots_[self->free_count_++] = static_cast<uint16_t>(slot - self->slots_.get());
}

void VhostUserQueueWorker::TakeChains() {
  while (free_count_ > 0) {
    uint16_t index = free_slots_[free_count_ - 1];
    Slot& slot = slots_[index];
    struct iovec* iov = &iovs_[static_cast<size_t>(index) * iov_per_slot_];
    Chain chain;
    Virtqueue::PopResult result = ring_.Pop(iov, iov_per_slot_, &chain);
    if (result != Virtqueue::PopResult::kChain) return;
    --free_count_;
    slot.head = chain.head;
    slot.request.in = chain.iov;
    slot.request.in_count = chain.readable;
    slot.request.out = chain.iov + chain.readable;
    slot.request.out_count = chain.writable;
    queue_->Dispatch(&slot.request);
  }
}

void VhostUserQueueWorker::FlushUsed() {
  if (ring_.FlushUsed()) Notify(run_.call_fd);
}

void VhostUserQueueWorker::ReportBroken() {
  if (broken_reported_ || !ring_.broken()) return;
  broken_reported_ = true;
  static log::RateLimit limit;
  log::Limited(limit, log::Level::kError,
               "{}: the guest broke the virtqueue ({}); it is stopped until the frontend restarts "
               "it",
               name_, ring_.broken_reason());
  Notify(run_.err_fd);
}

void VhostUserQueueWorker::LoseKick(const char* why) {
  // Level-triggered epoll would report a hung-up fd on every wait: the thread would spin.
  loop_->Unwatch(run_.kick_fd);
  kick_lost_ = true;
  static log::RateLimit limit;
  log::Limited(limit, log::Level::kWarn,
               "{}: the kick fd {}; the ring is stopped until the frontend sends a new one", name_,
               why);
}

void VhostUserQueueWorker::WaitForEvents() {
  struct epoll_event events[4];
  int n = loop_->Wait(events, 4, -1);
  if (n < 0) {
    log::Error("{}: epoll_wait: {}", name_, strerror(-n));
    return;
  }
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 != kKickTag) continue;
    // The frontend may pass any fd as the kick fd (a pipe, a socket) and close its other end.
    if (events[i].events & (EPOLLHUP | EPOLLERR)) {
      LoseKick("hung up");
      continue;
    }
    uint64_t count;
    // Only this thread reads the kick fd, and only once it is readable.
    ssize_t r = ::read(run_.kick_fd, &count, sizeof(count));
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
      LoseKick(r == 0 ? "reached its end" : "cannot be read");
    }
  }
}

void VhostUserQueueWorker::Serve() {
  block::IoQueue& io = queue_->io_queue();
  while (!loop_->stop_requested() && !kick_lost_) {
    ring_.DisableKick();
    TakeChains();
    io.Poll();  // submits the batch, runs whatever completed
    FlushUsed();
    ReportBroken();
    // Sleep only when the ring is empty as seen after re-arming kicks; with every slot busy (or a
    // broken ring) only completions can make progress, and kicks are not wanted.
    if (free_count_ > 0 && !ring_.broken() && !ring_.EnableKick()) continue;
    WaitForEvents();
  }
  Drain();
  // A ring without its kick fd stays stopped until the socket thread ends the run (any message
  // for the ring does; the device then waits for a new kick fd before starting it again).
  while (!loop_->stop_requested()) WaitForEvents();
}

void VhostUserQueueWorker::Drain() {
  block::IoQueue& io = queue_->io_queue();
  for (;;) {
    io.Poll();
    FlushUsed();
    if (free_count_ == slot_count_) break;
    // Without a completion fd the driver completes everything within Poll().
    if (io.event_fd() >= 0) WaitForEvents();
  }
  ReportBroken();
}

}  // namespace bexd::exp
