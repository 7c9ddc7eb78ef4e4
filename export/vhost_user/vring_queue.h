// SPDX-License-Identifier: GPL-2.0-or-later
// One virtqueue of a vhost-user-fs export: the virtqueue transport on its own queue thread
// (export/queue/queue_thread.h). The thread lives as long as the export; the socket thread starts
// and stops runs as the frontend configures the ring. While a ring runs, the thread takes chains
// off it, points a slot's in/out iovecs straight at guest memory and dispatches it to the request
// core. Used entries are published once per batch and the call eventfd is signalled only when the
// guest asked for it (EVENT_IDX).
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>

#include "export/queue/queue_thread.h"
#include "export/queue/transport.h"
#include "export/vhost_user/guest_memory.h"
#include "export/vhost_user/virtqueue.h"
#include "fuse/queue_stats.h"
#include "fuse/session.h"

namespace bexd::exports {

// What one run of a ring needs. The fds and the memory are borrowed: they stay valid until Stop()
// has returned.
struct VringRun {
  VirtqueueLayout layout;
  const GuestMemory* memory = nullptr;
  int kick_fd = -1;
  int call_fd = -1;  // -1: the guest is never notified
  int err_fd = -1;   // -1: a broken ring is only logged
};

class VringQueue final : public QueueTransport {
 public:
  // Starts the queue thread (see QueueThreadOptions: the hiprio queue serves no block I/O).
  static absl::StatusOr<std::unique_ptr<VringQueue>> Create(std::shared_ptr<fuse::Session> session,
                                                            QueueThreadOptions options);
  ~VringQueue() override;  // stops a run in progress and joins the thread

  // Begins serving the ring; returns once the thread has taken it over. Fails (and stays
  // stopped) if the ring lies outside guest memory or an fd cannot be watched.
  absl::Status Start(const VringRun& run);
  // Stops taking chains, waits until every request in flight has completed, publishes their used
  // entries and notifies the guest. Returns the next available index (what GET_VRING_BASE
  // reports). Without a run in progress, returns the index where the last run ended.
  uint16_t Stop();
  bool running() const { return thread_->running(); }
  // Whether the last run lost its kick fd (it hung up, see LoseKick). Only between runs: after
  // Stop() has returned.
  bool kick_lost() const { return kick_lost_; }
  fuse::QueueStatsSnapshot Stats() const { return thread_->Stats(); }

  // The transport, on the queue thread:
  absl::Status Attach(QueueThread& thread) override;
  Fetched Fetch(QueueThread& thread, bool idle) override;
  void Reply(uint32_t slot, int64_t result) override;
  void Flush() override;
  bool PrepareToSleep(QueueThread& thread) override;
  // Kicks stay off while the thread spins: Fetch() turned them off, PrepareToSleep() turns them on.
  bool RequestsWaiting() const override { return !kick_lost_ && ring_.HasAvail(); }
  void OnEvent(uint64_t tag, uint32_t events) override;

 private:
  static constexpr uint64_t kKickTag = 1;

  VringQueue() = default;
  // Stops watching the kick fd and taking chains: the ring is stopped for the rest of this run.
  void LoseKick(const char* why);
  void ReportBroken();
  // Breaks the ring once guest memory faulted (guest_memory_faults.h): what it read since may be
  // zeroes instead of the guest's data.
  void CheckMemory();

  // Owned by the queue thread while running, by the socket thread while idle.
  VringRun run_;
  Virtqueue ring_;
  bool broken_reported_ = false;
  bool kick_lost_ = false;        // the kick fd hung up: no more chains until the next run
  bool kick_is_eventfd_ = false;  // watched edge-triggered and never read (Attach)
  uint32_t slot_count_ = 0;
  int iov_per_slot_ = 0;
  std::unique_ptr<struct iovec[]> iovs_;  // iov_per_slot_ per slot
  std::unique_ptr<uint16_t[]> heads_;     // per slot: the head of its chain
  std::unique_ptr<QueueThread> thread_;   // last: joined before the transport state goes
};

}  // namespace bexd::exports
