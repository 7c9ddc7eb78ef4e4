// SPDX-License-Identifier: GPL-2.0-or-later
// A small pool of threads that runs blocking I/O for one IoQueue. The queue thread hands over a
// batch of requests with one lock acquisition; finished requests come back through a list that
// the queue thread collects in Poll(), woken by a write to its eventfd.
#pragma once

#include <absl/status/statusor.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "block/request_list.h"

namespace bexd::block {

// One worker thread's executor. It may keep per-thread scratch memory (bounce buffers) and
// stores each request's result in the request's driver state.
class Worker {
 public:
  virtual ~Worker() = default;
  virtual void Run(IoRequest* request) = 0;
};

class WorkerPool {
 public:
  // Starts `threads` workers, each with its own Worker from make_worker. notify_fd is an eventfd
  // written when finished requests wait to be taken.
  static absl::StatusOr<std::unique_ptr<WorkerPool>> Start(
      int threads, int notify_fd, const std::function<std::unique_ptr<Worker>()>& make_worker);
  // Waits for running jobs; jobs not yet started are dropped and never finish.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Moves `count` requests from `jobs` to the workers.
  void Dispatch(RequestList& jobs, uint32_t count);
  // Moves every finished request to `finished`; returns how many.
  uint32_t TakeFinished(RequestList* finished);

 private:
  explicit WorkerPool(int notify_fd) : notify_fd_(notify_fd) {}
  void Loop(Worker* worker);

  const int notify_fd_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  RequestList jobs_;
  RequestList finished_;
  uint32_t finished_count_ = 0;
  bool stopping_ = false;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

}  // namespace bexd::block
