// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/worker_pool.h"

#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <system_error>

namespace bexd::block {

absl::StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Start(
    int threads, int notify_fd, const std::function<std::unique_ptr<Worker>()>& make_worker) {
  std::unique_ptr<WorkerPool> pool(new WorkerPool(notify_fd));
  for (int i = 0; i < threads; ++i) {
    pool->workers_.push_back(make_worker());
    Worker* worker = pool->workers_.back().get();
    try {
      pool->threads_.emplace_back([pool = pool.get(), worker] { pool->Loop(worker); });
    } catch (const std::system_error& error) {
      return absl::ResourceExhaustedError(
          fmt::format("cannot start an I/O worker thread: {}", error.what()));
    }
    pthread_setname_np(pool->threads_.back().native_handle(), "bexd-io-worker");
  }
  return pool;
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void WorkerPool::Dispatch(RequestList& jobs, uint32_t count) {
  if (count == 0) return;
  {
    std::lock_guard lock(mutex_);
    jobs_.Splice(jobs);
  }
  if (count == 1) {
    work_ready_.notify_one();
  } else {
    work_ready_.notify_all();
  }
}

uint32_t WorkerPool::TakeFinished(RequestList* finished) {
  std::lock_guard lock(mutex_);
  finished->Splice(finished_);
  uint32_t count = finished_count_;
  finished_count_ = 0;
  return count;
}

void WorkerPool::Loop(Worker* worker) {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    IoRequest* request = jobs_.PopFront();
    lock.unlock();
    worker->Run(request);
    lock.lock();
    bool first = finished_.empty();
    finished_.PushBack(request);
    ++finished_count_;
    if (first) {
      // The queue thread drains the eventfd before taking the list, so one write per non-empty
      // list is enough; a write that lands after the take only causes a spurious Poll().
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = write(notify_fd_, &one, sizeof(one));
    }
  }
}

}  // namespace bexd::block
