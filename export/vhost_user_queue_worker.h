// One virtqueue's thread. It lives as long as the export and owns the queue's block IoQueue, its
// fuse::Queue and its request slots. While a ring runs, the thread sleeps in epoll on the ring's
// kick eventfd, the IoQueue's completion fd and a stop eventfd; it takes chains off the ring,
// points a slot's in/out iovecs straight at guest memory and dispatches it to the request core.
// Used entries are published once per batch and the call eventfd is signalled only when the
// guest asked for it (EVENT_IDX). The socket thread starts and stops runs; the hot path takes no
// lock and allocates nothing.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <sys/uio.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "export/event_loop.h"
#include "export/guest_memory.h"
#include "export/virtqueue.h"
#include "fuse/queue.h"
#include "fuse/queue_stats.h"
#include "fuse/request.h"
#include "fuse/session.h"

namespace bexd::exp {

// What one run of a ring needs. The fds and the memory are borrowed: they stay valid until Stop()
// has returned.
struct VringRun {
  VirtqueueLayout layout;
  const GuestMemory* memory = nullptr;
  int kick_fd = -1;
  int call_fd = -1;  // -1: the guest is never notified
  int err_fd = -1;   // -1: a broken ring is only logged
};

class VhostUserQueueWorker {
 public:
  // Starts the thread and creates its IoQueue and fuse::Queue there. `name` labels log lines,
  // `thread_name` (at most 15 bytes) names the thread for ps and top; `cpu` >= 0 pins the thread
  // to that CPU first, -1 leaves it to the scheduler.
  static absl::StatusOr<std::unique_ptr<VhostUserQueueWorker>> Create(
      std::shared_ptr<fuse::Session> session, std::string name, const std::string& thread_name,
      int cpu = -1);
  ~VhostUserQueueWorker();  // stops a run in progress and joins the thread
  VhostUserQueueWorker(const VhostUserQueueWorker&) = delete;
  VhostUserQueueWorker& operator=(const VhostUserQueueWorker&) = delete;

  // Begins serving the ring; returns once the thread has taken it over. Fails (and stays
  // stopped) if the ring lies outside guest memory or an fd cannot be watched.
  absl::Status Start(const VringRun& run);
  // Stops taking chains, waits until every request in flight has completed, publishes their used
  // entries and notifies the guest. Returns the next available index (what GET_VRING_BASE
  // reports). Without a run in progress, returns the index where the last run ended.
  uint16_t Stop();
  bool running() const;
  // Whether the last run lost its kick fd (it hung up, see LoseKick). Only between runs: after
  // Stop() has returned.
  bool kick_lost() const { return kick_lost_; }

  fuse::QueueStatsSnapshot Stats() const;

 private:
  struct Slot {
    fuse::Request request;
    uint16_t head = 0;
  };
  enum class State { kIdle, kRunning, kExit };

  explicit VhostUserQueueWorker(std::string name) : name_(std::move(name)) {}
  void ThreadMain(std::shared_ptr<fuse::Session> session, int cpu);
  // One run, from Start() to Stop().
  void Serve();
  // Takes chains while slots are free and dispatches them.
  void TakeChains();
  // Sleeps until a kick, a completion or a stop request; consumes the kick. A kick fd that hung
  // up or cannot be read is dropped (LoseKick).
  void WaitForEvents();
  // Stops watching the kick fd and taking chains: the ring is stopped for the rest of this run.
  void LoseKick(const char* why);
  // After a stop request: completes what is in flight.
  void Drain();
  void FlushUsed();
  void ReportBroken();
  void ResizeSlots(uint32_t size);
  static void OnRequestDone(fuse::Request* request, int64_t result, void* context);

  const std::string name_;
  std::thread thread_;
  std::unique_ptr<fuse::Queue> queue_;  // created on the thread; read by Stats() afterwards

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  State state_ = State::kIdle;
  bool ready_ = false;  // the thread finished setting up (queue_ or setup_error_ is set)
  absl::Status setup_error_;
  std::unique_ptr<EventLoop> loop_;  // of the current run

  // Owned by the thread while running, by the socket thread (under mutex_) while idle.
  VringRun run_;
  Virtqueue ring_;
  bool broken_reported_ = false;
  bool kick_lost_ = false;  // the kick fd hung up: no more chains until the next run
  uint32_t slot_count_ = 0;
  int iov_per_slot_ = 0;
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<struct iovec[]> iovs_;  // iov_per_slot_ per slot
  std::unique_ptr<uint16_t[]> free_slots_;
  uint32_t free_count_ = 0;
};

}  // namespace bexd::exp
