// SPDX-License-Identifier: GPL-2.0-or-later
// Engine: the metadata thread, the intake of requests and control calls, and replies.
#include "block/qcow2/engine.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "block/qcow2/epoll_set.h"
#include "block/qcow2/queue.h"
#include "util/log.h"

namespace bexd::block::qcow2 {

Engine::Engine(ImageState* image, const Config& config, Loaded loaded)
    : image_(image),
      g_(image->geometry),
      config_(config),
      header_(std::move(loaded.header)),
      snapshots_(std::move(loaded.snapshots)),
      snapshot_table_bytes_(loaded.snapshot_table_bytes),
      idle_(&scheduler_),
      l1_disk_(std::move(loaded.l1)),
      slab_released_(&scheduler_),
      reftable_(std::move(loaded.reftable)),
      refblocks_(image->geometry.cluster_size, config.refcount_cache_blocks),
      alloc_mutex_(&scheduler_),
      file_size_at_open_(loaded.file_size),
      decreases_applied_(&scheduler_),
      writeback_mutex_(&scheduler_) {
  zero_from_ = g_.clusters_for(loaded.file_size);
  dirty_bit_on_disk_ = (header_.incompatible_features & kIncompatDirty) != 0;
  InitMetadataClusters();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Start(ImageState* image, const Config& config,
                                                      Loaded loaded) {
  std::unique_ptr<Engine> engine(new Engine(image, config, std::move(loaded)));
  engine->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  engine->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  engine->timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (engine->wake_fd_ < 0 || engine->epoll_fd_ < 0 || engine->timer_fd_ < 0) {
    return absl::ErrnoToStatus(errno, fmt::format("node '{}': cannot create the metadata "
                                                  "thread's event fds",
                                                  image->node_name));
  }
  image->engine = engine.get();
  std::promise<absl::Status> started;
  std::future<absl::Status> result = started.get_future();
  try {
    engine->thread_ = std::thread([raw = engine.get(), &started] { raw->Run(&started); });
  } catch (const std::system_error& error) {
    image->engine = nullptr;
    return absl::ResourceExhaustedError(fmt::format(
        "node '{}': cannot start the metadata thread: {}", image->node_name, error.what()));
  }
  absl::Status status = result.get();
  if (!status.ok()) {
    engine->thread_.join();
    image->engine = nullptr;
    return status;
  }
  return engine;
}

Engine::~Engine() {
  if (thread_.joinable()) {
    auto control = std::make_shared<Control>();
    control->kind = Control::Kind::kStop;
    std::future<absl::Status> done = control->done.get_future();
    {
      std::lock_guard lock(mutex_);
      controls_.push_back(control);
    }
    Wake();
    done.wait();
    thread_.join();
  }
  for (int fd : {wake_fd_, epoll_fd_, timer_fd_}) {
    if (fd >= 0) close(fd);
  }
}

absl::Status Engine::SetUp() {
  auto file = image_->file->CreateQueue();
  if (!file.ok()) return file.status();
  file_queue_ = std::move(*file);
  io_ = std::make_unique<ChildIo>(&scheduler_, file_queue_.get(), image_);
  // Only writes read the image through itself (copy-on-write). A read-only image, such as every
  // backing file of a chain, has none: its self_ queue, which would open queues on the whole
  // chain below it, would make a chain of N images cost N*N/2 libaio contexts.
  if (!image_->read_only) {
    auto self = Qcow2Queue::Create(image_, nullptr);
    if (!self.ok()) return self.status();
    self_ = std::move(*self);
  }
  std::vector<int> fds = {wake_fd_, timer_fd_};
  file_queue_->AppendWaitFds(&fds);
  if (self_) self_->AppendWaitFds(&fds);
  absl::Status watched = WatchForReading(epoll_fd_, fds);
  if (!watched.ok()) {
    return absl::Status(watched.code(),
                        fmt::format("node '{}': metadata thread: {}", image_->node_name,
                                    std::string(watched.message())));
  }
  if (config_.cache_clean_interval_s > 0) {
    struct itimerspec interval = {};
    interval.it_interval.tv_sec = static_cast<time_t>(config_.cache_clean_interval_s);
    interval.it_value = interval.it_interval;
    timerfd_settime(timer_fd_, 0, &interval, nullptr);
  }
  return absl::OkStatus();
}

void Engine::Run(std::promise<absl::Status>* started) {
  pthread_setname_np(pthread_self(), "bexd-qcow2-meta");
  absl::Status status = SetUp();
  bool ok = status.ok();
  started->set_value(std::move(status));
  if (ok) {
    for (;;) {
      TakeIncoming();
      scheduler_.RunReady();
      file_queue_->Poll();
      if (self_) self_->Poll();
      CheckGracePeriods();
      if (!scheduler_.idle()) continue;
      if (stop_ && !writing_corrupt_bit_) break;
      struct epoll_event events[8];
      int count = epoll_wait(epoll_fd_, events, 8, PollTimeoutMs());
      for (int i = 0; i < count; ++i) {
        if (events[i].data.fd != timer_fd_) continue;
        uint64_t expirations;
        if (read(timer_fd_, &expirations, sizeof(expirations)) > 0) {
          DropUnusedTables();
          refblocks_.DropUnused();
        }
      }
    }
  }
  // The queues were created on this thread; they go with it.
  self_.reset();
  io_.reset();
  file_queue_.reset();
}

int Engine::PollTimeoutMs() const {
  // Children that complete inside Poll() (no event fd) are polled again at once.
  if ((file_queue_->event_fd() < 0 && file_queue_->in_flight() > 0) ||
      (self_ && self_->needs_polling())) {
    return 0;
  }
  // Grace periods end when queue threads finish requests, which nothing signals: look again
  // soon.
  return grace_batches_.empty() ? -1 : 1;
}

void Engine::Wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void Engine::Post(RequestList& requests) {
  {
    std::lock_guard lock(mutex_);
    incoming_.Splice(requests);
  }
  Wake();
}

void Engine::ReportCorruption(std::string what) {
  {
    std::lock_guard lock(mutex_);
    corruption_reports_.push_back(std::move(what));
  }
  Wake();
}

void Engine::TakeIncoming() {
  uint64_t signals;
  [[maybe_unused]] ssize_t n = read(wake_fd_, &signals, sizeof(signals));
  RequestList requests;
  std::vector<std::shared_ptr<Control>> controls;
  std::vector<std::string> reports;
  {
    std::lock_guard lock(mutex_);
    requests.Splice(incoming_);
    controls.swap(controls_);
    reports.swap(corruption_reports_);
  }
  for (const std::string& report : reports) MarkCorrupt(report);
  while (IoRequest* request = requests.PopFront()) Spawn(HandleRequest(request));
  for (auto& control : controls) Spawn(HandleControl(control));
}

absl::Status Engine::RunControl(Control::Kind kind, uint64_t size) {
  auto control = std::make_shared<Control>();
  control->kind = kind;
  control->size = size;
  std::future<absl::Status> done = control->done.get_future();
  {
    std::lock_guard lock(mutex_);
    controls_.push_back(control);
  }
  Wake();
  return done.get();
}

absl::Status Engine::Resize(uint64_t new_size) {
  return RunControl(Control::Kind::kResize, new_size);
}

absl::Status Engine::Close() {
  absl::Status status = RunControl(Control::Kind::kClose, 0);
  thread_.join();
  return status;
}

Task<void> Engine::HandleControl(std::shared_ptr<Control> control) {
  absl::Status status;
  switch (control->kind) {
    case Control::Kind::kResize:
      status = co_await ResizeTask(control->size);
      break;
    case Control::Kind::kClose:
      status = co_await CloseTask();
      stop_ = true;
      break;
    case Control::Kind::kStop:
      stop_ = true;
      break;
  }
  control->done.set_value(std::move(status));
}

Task<void> Engine::HandleRequest(IoRequest* request) {
  ++active_;
  RequestState* state = StateOf(request);
  uint64_t offset = request->offset + state->done;
  uint64_t length = request->length - state->done;
  switch (request->op) {
    case IoOp::kRead:
    case IoOp::kBlockStatus:
      co_await ResumeAfterLoad(request);
      break;
    case IoOp::kWrite: {
      Source source{request->iov, request->iovcnt, state->done};
      ReplyDone(request,
                co_await WriteRange(offset, length, source, (request->flags & kIoFua) != 0));
      break;
    }
    case IoOp::kFlush:
      ReplyDone(request, co_await Flush());
      break;
    case IoOp::kDiscard:
      ReplyDone(request, co_await Discard(offset, length));
      break;
    case IoOp::kWriteZeroes:
      ReplyDone(request, co_await WriteZeroes(offset, length, (request->flags & kIoMayUnmap) != 0));
      break;
    default:
      ReplyDone(request, -EINVAL);
      break;
  }
  if (--active_ == 0) idle_.WakeAll();
}

void Engine::ReplyDone(IoRequest* request, int64_t result) {
  RequestState* state = StateOf(request);
  state->reply = Reply::kDone;
  state->reply_result = result;
  state->queue->Reply(request);
}

void Engine::MarkCorrupt(const std::string& what) {
  if (corrupt_marked_) {
    log::Debug("node '{}': also corrupt: {}", image_->node_name, what);
    return;
  }
  corrupt_marked_ = true;
  image_->corrupt.store(true, std::memory_order_release);
  log::Error(
      "node '{}': the image is corrupt: {}; writes fail from now on (check it with "
      "'qemu-img check')",
      image_->node_name, what);
  if (!image_->read_only) {
    writing_corrupt_bit_ = true;
    Spawn(WriteCorruptBit());
  }
}

Task<void> Engine::WriteCorruptBit() {
  // Like QEMU, so that nobody writes to the image before it is checked.
  header_.incompatible_features |= kIncompatCorrupt;
  uint8_t bytes[8];
  StoreBe64(bytes, IncompatibleOnDisk());
  int result = co_await io_->Write(field::kIncompatibleFeatures, bytes, sizeof(bytes));
  if (result == 0) result = co_await io_->Flush();
  if (result < 0) {
    log::Error("node '{}': cannot mark the image corrupt in its header: {}", image_->node_name,
               std::strerror(-result));
  }
  writing_corrupt_bit_ = false;
}

}  // namespace bexd::block::qcow2
