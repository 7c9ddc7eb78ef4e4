#include "export/fuse_queue_thread.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <system_error>
#include <utility>

#include "export/queue_cpus.h"
#include "export/read_interrupt.h"
#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::exp {

absl::StatusOr<std::unique_ptr<FuseQueueThread>> FuseQueueThread::Create(
    uint32_t index, std::string export_id, std::shared_ptr<fuse::Session> session, UniqueFd device,
    int cpu) {
  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  if (!loop.ok()) return loop.status();
  absl::StatusOr<FuseSlotBuffers> buffers =
      FuseSlotBuffers::Create(kSlots, session->max_request_bytes(), session->max_reply_bytes());
  if (!buffers.ok()) return buffers.status();
  return std::unique_ptr<FuseQueueThread>(
      new FuseQueueThread(index, std::move(export_id), std::move(session), std::move(device), cpu,
                          std::move(*loop), std::move(*buffers)));
}

FuseQueueThread::FuseQueueThread(uint32_t index, std::string export_id,
                                 std::shared_ptr<fuse::Session> session, UniqueFd device, int cpu,
                                 std::unique_ptr<EventLoop> loop, FuseSlotBuffers buffers)
    : index_(index),
      cpu_(cpu),
      export_id_(std::move(export_id)),
      session_(std::move(session)),
      device_(std::move(device)),
      loop_(std::move(loop)),
      buffers_(std::move(buffers)),
      slots_(new Slot[kSlots]),
      free_(new uint32_t[kSlots]) {
  for (uint32_t i = 0; i < kSlots; ++i) {
    Slot& slot = slots_[i];
    slot.index = i;
    slot.in = {buffers_.request(i), 0};
    slot.out = {buffers_.reply(i), buffers_.reply_capacity()};
    slot.request.in = &slot.in;
    slot.request.in_count = 1;
    slot.request.out = &slot.out;
    slot.request.out_count = 1;
    slot.request.transport = &slot;
    free_[i] = kSlots - 1 - i;
  }
  free_count_ = kSlots;
}

FuseQueueThread::~FuseQueueThread() {
  RequestStop();
  Join();
}

absl::Status FuseQueueThread::Start(ExitFn on_exit) {
  if (absl::Status status = InstallReadInterrupt(); !status.ok()) {
    return Annotate(status);
  }
  on_exit_ = std::move(on_exit);
  std::promise<absl::Status> started;
  std::future<absl::Status> result = started.get_future();
  std::promise<void> ended;
  ended_ = ended.get_future();
  try {
    thread_ = std::thread(&FuseQueueThread::Run, this, &started, std::move(ended));
  } catch (const std::system_error& error) {
    return absl::ResourceExhaustedError(fmt::format(
        "export '{}' queue {}: cannot start a thread: {}", export_id_, index_, error.what()));
  }
  {
    std::lock_guard lock(signal_mutex_);
    signallable_ = true;
  }
  absl::Status status = result.get();
  if (!status.ok()) Join();
  return status;
}

absl::Status FuseQueueThread::Annotate(const absl::Status& status) const {
  return absl::Status(status.code(), fmt::format("export '{}' queue {}: {}", export_id_, index_,
                                                 std::string(status.message())));
}

void FuseQueueThread::RequestStop() {
  loop_->RequestStop();
  InterruptIfRunning();
}

void FuseQueueThread::InterruptIfRunning() {
  std::lock_guard lock(signal_mutex_);
  if (signallable_) InterruptRead(thread_.native_handle());
}

void FuseQueueThread::Join() {
  if (!thread_.joinable()) return;
  // The thread checks for a stop before each blocking read, but a stop that lands between that
  // check and the read loses its signal: repeat it until the thread is done.
  while (ended_.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    if (loop_->stop_requested()) InterruptIfRunning();
  }
  {
    std::lock_guard lock(signal_mutex_);
    signallable_ = false;
  }
  thread_.join();
}

fuse::QueueStatsSnapshot FuseQueueThread::Stats() const {
  if (queue_ == nullptr) return {};
  return fuse::QueueStatsSnapshot::Of(queue_->stats());
}

void FuseQueueThread::Run(std::promise<absl::Status>* started, std::promise<void> ended) {
  const std::string name = "bexd-fuse-q" + std::to_string(index_);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  absl::Status status = SetUp();
  const bool ok = status.ok();
  started->set_value(std::move(status));  // `started` dies with Start()'s frame after this
  if (ok) {
    Serve();
    if (on_exit_) on_exit_(index_, failed_);
  }
  ended.set_value();
}

absl::Status FuseQueueThread::SetUp() {
  // Pinned before the IoQueue exists, so that its memory is first touched on the right CPU.
  if (cpu_ >= 0) {
    if (absl::Status status = PinCurrentThread(cpu_); !status.ok()) return Annotate(status);
  }
  if (absl::Status status = AcceptReadInterrupt(); !status.ok()) {
    return Annotate(status);
  }
  const int flags = ::fcntl(device_.get(), F_GETFL);
  if (flags < 0) {
    return Annotate(
        absl::InternalError(fmt::format("fcntl(F_GETFL) of /dev/fuse: {}", std::strerror(errno))));
  }
  device_flags_ = flags & ~O_NONBLOCK;
  device_blocking_ = (flags & O_NONBLOCK) == 0;
  // The IoQueue belongs to the thread that uses it (its own libaio context, for example).
  absl::StatusOr<std::unique_ptr<block::IoQueue>> io_queue = session_->node().CreateQueue();
  if (!io_queue.ok()) {
    return Annotate(absl::Status(
        io_queue.status().code(),
        fmt::format("cannot create an I/O queue: {}", std::string(io_queue.status().message()))));
  }
  const int io_fd = (*io_queue)->event_fd();
  queue_ = std::make_unique<fuse::Queue>(session_, std::move(*io_queue), &OnReply, this);
  // Edge-triggered: a busy thread reads the device until EAGAIN and polls the IoQueue after every
  // wake-up, so it never needs a level reminder, and a busy queue that stopped reading (no free
  // slot) is not woken for requests another queue will take. Exclusive: all clones wait on the
  // one kernel input queue, and without it every request woke every queue thread, all but one
  // of them only to read EAGAIN (4 queues ran at a third of 1 queue's rate in perf/run.sh). The
  // kernel passes over exclusive entries whose thread is not in epoll_wait, so an idle thread in
  // its blocking read still gets its turn.
  absl::Status status = loop_->Watch(device_.get(), EPOLLIN | EPOLLET | EPOLLEXCLUSIVE, kDeviceTag);
  if (status.ok() && io_fd >= 0) status = loop_->Watch(io_fd, EPOLLIN | EPOLLET, kIoTag);
  return status.ok() ? status : Annotate(status);
}

void FuseQueueThread::Serve() {
  bool device_ready = true;  // edge-triggered, so assume requests wait until a read says EAGAIN
  struct epoll_event events[4];
  while (true) {
    if (accepting_ && loop_->stop_requested()) accepting_ = false;
    if (accepting_ && free_count_ == kSlots) {
      // Idle: only a request can give this thread work. Blocking readers wait in the kernel's
      // queue first come, first served, so idle queue threads take turns. An exclusive epoll
      // entry keeps the place it was registered at instead, and at queue depth 1 queue 0 took
      // 97 % of the requests, leaving 2 and 4 queues no faster than 1 (perf/README.md).
      const ReadResult result = ReadRequest(/*wait=*/true);
      if (result == ReadResult::kEnded) EndServing(/*failed=*/true);
      if (result == ReadResult::kTaken) {
        device_ready = true;  // more may wait behind it; read them only if it stays in flight
        queue_->io_queue().Poll();
      }
      continue;
    }
    while (accepting_ && device_ready && free_count_ > 0) {
      const ReadResult result = ReadRequest(/*wait=*/false);
      if (result == ReadResult::kEmpty) device_ready = false;
      if (result == ReadResult::kEnded) EndServing(/*failed=*/true);
    }
    // Submits what the requests just read queued, and answers whatever has completed.
    queue_->io_queue().Poll();
    if (!accepting_ && free_count_ == kSlots) return;
    if (accepting_ && free_count_ == kSlots) continue;  // idle again: back to the blocking read
    if (accepting_ && device_ready && free_count_ > 0) continue;
    const int n = loop_->Wait(events, 4, -1);
    if (n < 0) {
      // Only a broken epoll set gets here; keep draining without it rather than spin.
      log::Error("export '{}' queue {}: epoll_wait failed: {}", export_id_, index_,
                 std::strerror(-n));
      EndServing(/*failed=*/true);
      const struct timespec pause = {0, 1000000};
      nanosleep(&pause, nullptr);
      continue;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kDeviceTag) device_ready = true;
    }
  }
}

bool FuseQueueThread::SetDeviceBlocking(bool blocking) {
  if (blocking == device_blocking_) return true;
  // The clone descriptor is this queue's own open file, so its flags concern no other queue.
  if (::fcntl(device_.get(), F_SETFL, blocking ? device_flags_ : device_flags_ | O_NONBLOCK) != 0) {
    log::Error("export '{}' queue {}: cannot switch /dev/fuse to {} reads: {}", export_id_, index_,
               blocking ? "blocking" : "non-blocking", std::strerror(errno));
    return false;
  }
  device_blocking_ = blocking;
  return true;
}

FuseQueueThread::ReadResult FuseQueueThread::ReadRequest(bool wait) {
  if (!SetDeviceBlocking(wait)) return ReadResult::kEnded;
  Slot& slot = slots_[free_[free_count_ - 1]];
  const ssize_t n = ::read(device_.get(), slot.in.iov_base, buffers_.request_capacity());
  if (n > 0) {
    --free_count_;
    slot.in.iov_len = static_cast<size_t>(n);
    queue_->Dispatch(&slot.request);
    return ReadResult::kTaken;
  }
  if (n < 0 && errno == EAGAIN) return ReadResult::kEmpty;
  if (n < 0 && errno == EINTR) return ReadResult::kRetry;
  if (n < 0 && errno == ENODEV) {
    // Unmounted, or the connection was aborted: no request will come again.
    log::Info("export '{}' queue {}: the FUSE connection has ended", export_id_, index_);
  } else {
    log::Error("export '{}' queue {}: reading /dev/fuse failed: {}", export_id_, index_,
               n == 0 ? "end of file" : std::strerror(errno));
  }
  return ReadResult::kEnded;
}

void FuseQueueThread::OnReply(fuse::Request* request, int64_t result, void* context) {
  auto* self = static_cast<FuseQueueThread*>(context);
  const Slot& slot = *static_cast<const Slot*>(request->transport);
  if (result > 0) {
    self->SendReply(slot, static_cast<size_t>(result));
  } else if (result < 0) {
    // The kernel waits for an answer the core could not build; only ending the connection
    // releases its caller.
    log::Error(
        "export '{}' queue {}: the kernel sent a malformed FUSE request ({}); shutting "
        "the export down",
        self->export_id_, self->index_, std::strerror(static_cast<int>(-result)));
    self->EndServing(/*failed=*/true);
  }
  self->free_[self->free_count_++] = slot.index;
}

void FuseQueueThread::SendReply(const Slot& slot, size_t bytes) {
  // The reply must go to the descriptor the request came from: the kernel looks requests up in
  // the processing list of that clone.
  const ssize_t n = ::write(device_.get(), slot.out.iov_base, bytes);
  if (n == static_cast<ssize_t>(bytes)) return;
  if (n < 0 && (errno == ENOENT || errno == ENODEV)) {
    // ENOENT: the request was interrupted and the kernel forgot it; ENODEV: the connection ended.
    // A client that interrupts in a loop triggers this at will.
    static log::RateLimit undelivered;
    log::Limited(undelivered, log::Level::kDebug, "export '{}' queue {}: reply not delivered: {}",
                 export_id_, index_, std::strerror(errno));
    return;
  }
  log::Error("export '{}' queue {}: writing a {}-byte reply failed: {}", export_id_, index_, bytes,
             n < 0 ? std::string(std::strerror(errno)) : fmt::format("short write of {} bytes", n));
}

void FuseQueueThread::EndServing(bool failed) {
  accepting_ = false;
  failed_ = failed_ || failed;
}

}  // namespace bexd::exp
