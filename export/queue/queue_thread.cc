// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/queue/queue_thread.h"

#include <pthread.h>
#include <time.h>

#include <chrono>
#include <cstring>
#include <system_error>
#include <utility>

#include "export/queue/no_block_io_queue.h"
#include "export/queue/queue_cpus.h"
#include "export/queue/thread_interrupt.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace bexd::exports {
namespace {

// Tells the CPU this is a spin loop: it then spends less power and leaves its sibling hyperthread
// more of the core.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<QueueThread>> QueueThread::Start(
    std::shared_ptr<fuse::Session> session, QueueThreadOptions options) {
  std::unique_ptr<QueueThread> thread(new QueueThread(std::move(session), std::move(options)));
  try {
    thread->thread_ = std::thread(&QueueThread::Main, thread.get());
  } catch (const std::system_error& error) {
    return absl::ResourceExhaustedError(
        fmt::format("{}: cannot start a thread: {}", thread->label(), error.what()));
  }
  std::unique_lock lock(thread->mutex_);
  thread->changed_.wait(lock, [&] { return thread->state_ != State::kSettingUp; });
  if (thread->state_ == State::kExit) {
    absl::Status error = thread->run_error_;
    lock.unlock();
    thread->thread_.join();
    return error;
  }
  return thread;
}

QueueThread::QueueThread(std::shared_ptr<fuse::Session> session, QueueThreadOptions options)
    : session_(std::move(session)), options_(std::move(options)) {}

QueueThread::~QueueThread() { Exit(); }

void QueueThread::Exit() {
  if (!thread_.joinable()) return;
  EndRun();
  {
    std::lock_guard lock(mutex_);
    state_ = State::kExit;
  }
  changed_.notify_all();
  thread_.join();
}

void QueueThread::Main() {
  absl::Status setup = SetUp();
  std::unique_lock lock(mutex_);
  run_error_ = setup;
  state_ = setup.ok() ? State::kIdle : State::kExit;
  changed_.notify_all();
  while (state_ != State::kExit) {
    changed_.wait(lock, [&] { return state_ == State::kStarting || state_ == State::kExit; });
    if (state_ == State::kExit) break;
    lock.unlock();
    Run();
    lock.lock();
  }
}

absl::Status QueueThread::SetUp() {
  pthread_setname_np(pthread_self(), options_.thread_name.substr(0, 15).c_str());
  for (absl::Status status : {InstallThreadInterrupt(), AcceptThreadInterrupt()}) {
    if (!status.ok()) return util::AnnotateStatus(label(), status);
  }
  // Pinned before the IoQueue exists, so that its memory is first touched on the right CPU.
  if (options_.cpu >= 0) {
    if (absl::Status status = PinCurrentThread(options_.cpu); !status.ok()) {
      return util::AnnotateStatus(label(), status);
    }
  }
  std::unique_ptr<block::IoQueue> io_queue;
  if (options_.block_io) {
    // The IoQueue belongs to the thread that uses it (its own libaio context, for example).
    absl::StatusOr<std::unique_ptr<block::IoQueue>> created = session_->node().CreateQueue();
    if (!created.ok()) {
      return util::AnnotateStatus(fmt::format("{}: cannot create an I/O queue", label()),
                                  created.status());
    }
    io_queue = std::move(*created);
    // Run() watches its fd edge-triggered and Serve() polls after every wake-up.
    io_queue->SetEdgeTriggeredWaiter();
  } else {
    io_queue = std::make_unique<NoBlockIoQueue>(label());
  }
  queue_ = std::make_unique<fuse::Queue>(session_, std::move(io_queue), &OnDone, this);
  return absl::OkStatus();
}

absl::Status QueueThread::BeginRun(QueueTransport* transport, uint32_t slots) {
  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  if (!loop.ok()) return util::AnnotateStatus(label(), loop.status());
  std::unique_lock lock(mutex_);
  if (state_ != State::kIdle) {
    return absl::FailedPreconditionError(
        fmt::format("{} {}", label(), state_ == State::kExit ? "has ended" : "is already running"));
  }
  loop_ = std::move(*loop);
  transport_ = transport;
  run_slots_ = slots;
  run_error_ = absl::OkStatus();
  state_ = State::kStarting;
  changed_.notify_all();
  changed_.wait(lock, [&] { return state_ != State::kStarting; });
  return run_error_;
}

void QueueThread::Run() {
  // Slots and their requests are reused from run to run; only a new count reallocates them.
  if (run_slots_ != free_.capacity()) requests_ = std::make_unique<fuse::Request[]>(run_slots_);
  free_.Reset(run_slots_);
  accepting_ = true;
  failed_ = false;
  absl::Status status;
  const int io_fd = queue_->io_queue().event_fd();
  // Edge-triggered: the thread polls the IoQueue after every wake-up, so it never needs a level
  // reminder, and the IoQueue need not clear its fd (SetEdgeTriggeredWaiter() in SetUp()).
  if (io_fd >= 0) status = loop_->Watch(io_fd, EPOLLIN | EPOLLET, kIoTag);
  if (status.ok()) status = transport_->Attach(*this);
  {
    std::lock_guard lock(mutex_);
    run_error_ = util::AnnotateStatus(label(), status);
    state_ = status.ok() ? State::kRunning : State::kIdle;
    if (!status.ok()) transport_ = nullptr;
  }
  changed_.notify_all();
  if (!status.ok()) return;
  Serve();
  transport_->Detach(failed_);
  // The transport's buffers may go with it; the next run names its own.
  queue_->io_queue().UseBuffers({});
  {
    std::lock_guard lock(mutex_);
    state_ = State::kIdle;
    transport_ = nullptr;
  }
  changed_.notify_all();
}

void QueueThread::Serve() {
  block::IoQueue& io = queue_->io_queue();
  const bool blocks_when_idle = transport_->BlocksWhenIdle();
  bool more = true;
  struct epoll_event events[8];
  for (;;) {
    if (accepting_ && loop_->stop_requested()) accepting_ = false;
    if (accepting_ && !free_.empty()) {
      more = transport_->Fetch(*this, free_.full()) == QueueTransport::Fetched::kMore;
    }
    // Submits what the requests just fetched queued, and answers whatever has completed.
    io.Poll();
    transport_->Flush();
    if (!accepting_ && free_.full()) return;
    // Idle again: back to the transport's own wait.
    if (accepting_ && free_.full() && blocks_when_idle) continue;
    if (accepting_ && more && !free_.empty()) continue;
    const bool spin = free_.full() && idle_window_.max_ns() > 0;
    const uint64_t out_of_work = spin ? util::MonotonicNs() : 0;
    if (spin && idle_window_.ns() > 0 && SpinForWork(idle_window_.ns())) {
      idle_window_.Record(util::MonotonicNs() - out_of_work);
      continue;
    }
    if (accepting_ && !transport_->PrepareToSleep(*this)) continue;
    const int n = loop_->Wait(events, 8, -1);
    if (spin) idle_window_.Record(util::MonotonicNs() - out_of_work);
    if (n < 0) {
      // Only a broken epoll set gets here; keep draining without it rather than spin.
      log::Error("{}: epoll_wait failed: {}", label(), std::strerror(-n));
      EndServing(/*failed=*/true);
      const struct timespec pause = {0, 1000000};
      nanosleep(&pause, nullptr);
      continue;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 != kIoTag) transport_->OnEvent(events[i].data.u64, events[i].events);
    }
  }
}

bool QueueThread::SpinForWork(uint64_t ns) {
  const uint64_t end = util::MonotonicNs() + ns;
  do {
    if (loop_->stop_requested()) return true;
    if (accepting_ && transport_->RequestsWaiting()) return true;
    CpuRelax();
  } while (util::MonotonicNs() < end);
  return false;
}

void QueueThread::DispatchNext() { queue_->Dispatch(&requests_[free_.Pop()]); }

void QueueThread::EndServing(bool failed) {
  accepting_ = false;
  failed_ = failed_ || failed;
}

void QueueThread::OnDone(fuse::Request* request, int64_t result, void* context) {
  auto* self = static_cast<QueueThread*>(context);
  const auto slot = static_cast<uint32_t>(request - self->requests_.get());
  self->transport_->Reply(slot, result);
  self->free_.Push(slot);
}

void QueueThread::RequestStop() {
  std::lock_guard lock(mutex_);
  if (loop_ != nullptr) loop_->RequestStop();
  if (state_ == State::kRunning && transport_->BlocksWhenIdle()) {
    InterruptThread(thread_.native_handle());
  }
}

void QueueThread::EndRun() {
  std::unique_lock lock(mutex_);
  if (loop_ != nullptr) loop_->RequestStop();
  const auto begun = std::chrono::steady_clock::now();
  auto next_report = begun + std::chrono::seconds(10);
  for (bool waited = false; state_ == State::kStarting || state_ == State::kRunning;
       waited = true) {
    // Storage that never answers keeps a stop waiting: say so, so that it is not a silent hang.
    if (const auto now = std::chrono::steady_clock::now(); now >= next_report) {
      log::Warn(
          "{}: still stopping after {} s: requests in flight on node '{}' have not "
          "completed",
          label(), std::chrono::duration_cast<std::chrono::seconds>(now - begun).count(),
          session_->node().node_name());
      next_report = now + std::chrono::seconds(30);
    }
    // A transport waiting in the kernel checks for a stop before each wait, but an interrupt that
    // lands between that check and the wait is lost: repeat it until the run has ended. Any other
    // thread still running after a round may be stuck in a call on an fd a peer controls (a
    // frontend's eventfd made blocking and full): interrupt it too.
    if (state_ == State::kRunning && (transport_->BlocksWhenIdle() || waited)) {
      InterruptThread(thread_.native_handle());
    }
    changed_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

bool QueueThread::running() const {
  std::lock_guard lock(mutex_);
  return state_ == State::kRunning;
}

fuse::QueueStatsSnapshot QueueThread::Stats() const {
  return fuse::QueueStatsSnapshot::Of(queue_->stats());
}

}  // namespace bexd::exports
