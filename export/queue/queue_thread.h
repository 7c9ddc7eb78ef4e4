// SPDX-License-Identifier: GPL-2.0-or-later
// The queue-thread skeleton every transport runs on. One QueueThread is one thread that owns
// everything its requests touch: its block IoQueue (created on the thread, after pinning, so its
// memory is first touched on the right CPU), its fuse::Queue, its request slots and its epoll
// set. The transport (transport.h) only says where requests come from and where replies go.
//
// The thread lives as long as the QueueThread and serves in runs: BeginRun() attaches a
// transport and serves until EndRun() or until the transport ends the run; then the thread waits
// for the next run (a vhost-user ring restarted by its frontend) or its end. Serving takes no
// lock and allocates nothing; starting and ending runs is control path.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "export/queue/event_loop.h"
#include "export/queue/poll_window.h"
#include "export/queue/slot_stack.h"
#include "export/queue/transport.h"
#include "fuse/queue.h"
#include "fuse/queue_stats.h"
#include "fuse/request.h"
#include "fuse/session.h"

namespace bexd::exports {

struct QueueThreadOptions {
  std::string label;        // names the queue in errors and logs: "export 'x' queue 0"
  std::string thread_name;  // for ps and top; at most 15 bytes are kept
  int cpu = -1;             // >= 0: pin the thread to this CPU before it creates its IoQueue
  // False: the thread creates no IoQueue from the node; requests that need block I/O fail with
  // EIO (vhost-user-fs's hiprio queue, which carries only FORGET and INTERRUPT).
  bool block_io = true;
  // > 0: before sleeping with no request in flight, spin up to this long (adaptively,
  // poll_window.h) while the transport's RequestsWaiting() says nothing has come. Only for a
  // transport whose clients run on other CPUs: spinning on a client's own CPU delays it.
  uint64_t poll_max_ns = 0;
};

class QueueThread {
 public:
  // The tag the IoQueue's completion fd has in loop(); transports use any other.
  static constexpr uint64_t kIoTag = 0;

  // Starts the thread and returns once it has pinned itself and created its queues, or with the
  // reason it could not (prefixed with the label).
  static absl::StatusOr<std::unique_ptr<QueueThread>> Start(std::shared_ptr<fuse::Session> session,
                                                            QueueThreadOptions options);
  ~QueueThread();  // Exit()
  QueueThread(const QueueThread&) = delete;
  QueueThread& operator=(const QueueThread&) = delete;

  // Serves requests from `transport` with `slots` request slots until EndRun() or until the
  // transport ends the run. Returns once the thread serves, or with Attach()'s error (the thread
  // then stays idle). `transport` must outlive the run. Only while no run is in progress.
  absl::Status BeginRun(QueueTransport* transport, uint32_t slots);
  // Asks the run to stop taking requests; it completes those in flight and ends. Safe from any
  // thread, including queue threads, any number of times.
  void RequestStop();
  // RequestStop(), then waits until the run has ended (the transport's Detach() has returned).
  // Returns at once without a run. Not from this queue thread.
  void EndRun();
  bool running() const;
  // EndRun(), then ends the thread and joins it; no run can begin after it. Stats() stay valid.
  // Not from this queue thread.
  void Exit();

  // A copy of the core's counters; valid also between and after runs.
  fuse::QueueStatsSnapshot Stats() const;
  const std::string& label() const { return options_.label; }

  // For the transport, on the queue thread during a run:
  EventLoop& loop() { return *loop_; }
  uint32_t slot_count() const { return free_.capacity(); }
  fuse::Request& request(uint32_t slot) { return requests_[slot]; }
  bool has_free_slot() const { return !free_.empty(); }
  // No request in flight.
  bool idle() const { return free_.full(); }
  // The slot the next request goes into: fill its request's `in`/`out`, then DispatchNext().
  uint32_t next_slot() const { return free_.Top(); }
  // Names the memory the transport's requests keep their data in, for a driver that registers
  // it with the kernel (block::IoQueue::UseBuffers); in Attach(). Forgotten when the run ends.
  void UseBuffers(std::span<const struct iovec> regions) { queue_->io_queue().UseBuffers(regions); }
  // Takes next_slot() and hands its request to the core.
  void DispatchNext();
  // Stops fetching: the run completes what is in flight and ends. `failed`: the transport's
  // source went away or misbehaved (reported to Detach()).
  void EndServing(bool failed);

 private:
  enum class State { kSettingUp, kIdle, kStarting, kRunning, kExit };

  QueueThread(std::shared_ptr<fuse::Session> session, QueueThreadOptions options);
  void Main();
  absl::Status SetUp();
  // One run: from Attach() to Detach().
  void Run();
  void Serve();
  // Spins for `ns`; true if work came (or a stop was requested) before it ended.
  bool SpinForWork(uint64_t ns);
  static void OnDone(fuse::Request* request, int64_t result, void* context);

  const std::shared_ptr<fuse::Session> session_;
  const QueueThreadOptions options_;
  std::thread thread_;
  std::unique_ptr<fuse::Queue> queue_;  // created on the thread before it reports ready

  // Control: guards state_, transport_, loop_ and run_error_ against the thread's changes.
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  State state_ = State::kSettingUp;
  absl::Status run_error_;  // SetUp()'s or Attach()'s failure
  QueueTransport* transport_ = nullptr;
  uint32_t run_slots_ = 0;
  std::unique_ptr<EventLoop> loop_;  // one per run: a stop request belongs to its run

  // The queue thread's own during a run.
  std::unique_ptr<fuse::Request[]> requests_;
  SlotStack free_;
  bool accepting_ = false;
  bool failed_ = false;
  // Only for waits with no request in flight (the client's next request, which at queue depth 1
  // comes a few µs after the reply). Waits for the device are not spun: measured, an O_DIRECT
  // request's wait kept a window open often enough to double the thread's CPU per request
  // without a faster reply.
  PollWindow idle_window_{options_.poll_max_ns};
};

}  // namespace bexd::exports
