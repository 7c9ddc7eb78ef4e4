// SPDX-License-Identifier: GPL-2.0-or-later
// One queue thread's I/O context on a FileNode. With aio=native, aligned reads and writes (and
// fdatasync where the kernel supports IOCB_CMD_FDSYNC) go to the libaio context the thread's
// file queues share (aio_context.h), batched into one io_submit per Poll(); the rest runs on a
// one-thread worker pool. With
// aio=io_uring this queue's own ring (uring_ring.h) takes the same reads and writes, every flush,
// and the fallocate of discard and write-zeroes on regular files, again one submission per Poll();
// the rest (and what the ring could not finish) goes to the one-thread pool. With aio=threads
// every request runs on a pool of kThreadsPerQueue workers. libaio, the ring and the workers
// signal the same eventfd, which is event_fd().
#pragma once

#include <absl/status/statusor.h>
#include <libaio.h>

#include <cstdint>
#include <memory>

#include "block/aio_context.h"
#include "block/block_node.h"
#include "block/file_node.h"
#include "block/request_list.h"
#include "block/uring_ring.h"
#include "block/worker_pool.h"

namespace bexd::block {

class FileQueue final : public IoQueue {
 public:
  // Requests in the kernel at once: per thread with libaio, per queue with io_uring; more wait in
  // the queue for the next Poll().
  static constexpr uint32_t kAioDepth = AioContext::kDepth;
  static constexpr int kThreadsPerQueue = 4;
  static constexpr int kHelperThreadsForAsync = 1;  // aio=native and aio=io_uring

  static absl::StatusOr<std::unique_ptr<FileQueue>> Create(std::shared_ptr<FileNode> node);
  // Waits for requests in the kernel and on workers; their callbacks never run.
  ~FileQueue() override;

  void Submit(IoRequest* request) override;
  void Poll() override;
  int event_fd() const override { return event_fd_; }
  uint32_t in_flight() const override { return in_flight_; }
  // aio=io_uring registers them (uring_ring.h); libaio and the workers have no use for them.
  void UseBuffers(std::span<const struct iovec> regions) override {
    if (uring_ != nullptr) uring_->UseBuffers(regions);
  }
  // Poll() stops clearing event_fd(): libaio, the ring and the workers signal it once per
  // completion, which is all an edge-triggered waiter needs.
  void SetEdgeTriggeredWaiter() override { edge_triggered_waiter_ = true; }

 private:
  FileQueue(std::shared_ptr<FileNode> node, int event_fd)
      : node_(std::move(node)), event_fd_(event_fd) {}

  void CompleteLater(IoRequest* request, int64_t result);
  void ToWorkers(IoRequest* request);
  // Queues the request for libaio or the ring if one takes it.
  bool ToAsync(IoRequest* request);
  bool PrepareAio(IoRequest* request);
  void SubmitAio();
  void SubmitLibaio();
  void SubmitRing();
  void ReapAio(RequestList* finished);
  void ReapLibaio(RequestList* finished);
  // Takes one batch from the thread's shared libaio ring: this queue's events onto reaped_, the
  // others handed over to their queues. How many it took (negative: io_getevents' error).
  int TakeLibaioEvents();
  // An event of this queue's that another queue took from the shared libaio ring.
  void HandOver(IoRequest* request, int64_t result);
  // The destructor's wait for this queue's iocbs, without running their callbacks.
  void WaitForLibaio();
  // A result from libaio or the ring: finished, or the rest handed to the workers.
  void AsyncDone(IoRequest* request, int64_t result, RequestList* finished);
  void DispatchJobs();
  // The worker pool, made by the first DispatchJobs(); false (logged) if its threads cannot start.
  bool StartWorkers();

  std::shared_ptr<FileNode> node_;
  const int event_fd_;
  std::shared_ptr<AioContext> aio_;      // aio=native only
  std::unique_ptr<UringRing> uring_;     // aio=io_uring only
  std::unique_ptr<WorkerPool> workers_;  // null until a request needs a worker

  RequestList aio_waiting_;  // prepared iocbs not yet given to io_submit
  RequestList jobs_;         // for the workers at the next Poll()
  RequestList local_;        // completed without I/O; callbacks run at the next Poll()
  RequestList reaped_;       // libaio events of ours taken from the ring, result in the state
  uint32_t jobs_count_ = 0;
  uint32_t in_kernel_ = 0;          // given to libaio or the ring, not yet reaped
  uint32_t aio_waiting_count_ = 0;  // libaio: requests in aio_waiting_
  uint32_t in_workers_ = 0;
  uint32_t in_flight_ = 0;
  bool edge_triggered_waiter_ = false;
  struct iocb* batch_[kAioDepth];
  struct io_event events_[kAioDepth];
};

}  // namespace bexd::block
