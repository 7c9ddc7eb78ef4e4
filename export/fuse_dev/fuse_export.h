// SPDX-License-Identifier: GPL-2.0-or-later
// The FUSE export: one block node presented as a regular file mounted over an existing regular
// file, served by one thread per /dev/fuse queue, or, over io_uring, by one thread per kernel
// ring queue (export/fuse_uring/) plus one /dev/fuse queue for what the kernel still sends there.
// See docs/fuse-export.md.
#pragma once

#include <absl/status/statusor.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "block/block_node.h"
#include "export/export.h"
#include "export/fuse_dev/device_transport.h"
#include "export/fuse_dev/fuse_mount.h"
#include "export/fuse_dev/fuse_mountpoint.h"
#include "export/fuse_dev/passthrough_setup.h"
#include "export/fuse_uring/ring_transport.h"
#include "export/options.h"
#include "export/queue/queue_thread.h"
#include "fuse/session.h"

namespace bexd::exports {

class FuseExport final : public Export {
 public:
  // More queues than this is a configuration mistake, not a need.
  static constexpr uint32_t kMaxQueues = 256;

  // Mounts and starts every queue thread; returns once the export serves requests. `on_ended`
  // runs when the connection ends without Stop() (see Export::EndedFn). Through StartExport(),
  // which checks the shared options and creates `session`.
  static absl::StatusOr<std::unique_ptr<FuseExport>> Start(const ExportOptions& options,
                                                           std::shared_ptr<block::BlockNode> node,
                                                           std::shared_ptr<fuse::Session> session,
                                                           EndedFn on_ended);
  ~FuseExport() override;

  std::string type() const override { return "fuse"; }
  void Stop() override;
  bool in_use() const override;
  std::vector<fuse::QueueStatsSnapshot> Stats() const override;
  std::optional<PassthroughStats> passthrough_stats() const override;
  // Tells the kernel to fetch the file's attributes again, so that a stat right after a QMP
  // resize shows the new size (the kernel otherwise keeps them for up to a second).
  void DropCachedAttributes() override;
  bool ending() const override { return ending_.load(std::memory_order_acquire) || ended(); }

 private:
  FuseExport(const ExportOptions& options, std::shared_ptr<block::BlockNode> node,
             std::shared_ptr<fuse::Session> session, MountpointClaim claim, FuseMount mount,
             EndedFn on_ended);

  // `io_uring`: the kernel is expected to offer FUSE over io_uring (one /dev/fuse queue).
  absl::Status StartQueues(std::vector<util::UniqueFd> devices, const std::vector<int>& cpus,
                           bool io_uring);
  // After INIT: the ring queues, one per possible CPU, each pinned to its CPU when this process
  // may run there. Returns once every ring has registered its entries.
  absl::Status StartRings(uint32_t depth);
  // Begins `thread`'s run on `transport`, counted in serving_ while it runs.
  absl::Status BeginServing(QueueThread& thread, QueueTransport* transport, uint32_t slots);
  // Waits until a queue has answered INIT; false if the connection ended first or INIT never came.
  bool WaitForInitReply();
  // Ends the ring threads after a failed start; the export goes on over /dev/fuse.
  void DropRings();
  void OnQueueExit(const std::string& queue, bool failed);
  // Once the queues run: waits for INIT and checks that the kernel took FUSE_PASSTHROUGH and
  // registers the backing file. "" if passthrough works, else why not.
  std::string CheckPassthrough();
  // Flushes the node, unmounts, closes the queue descriptors and releases the mountpoint. Runs
  // once, after every queue thread has stopped serving.
  void TearDown();

  const std::string mountpoint_;
  const std::shared_ptr<fuse::Session> session_;
  MountpointClaim claim_;
  FuseMount mount_;
  template <typename Transport>
  struct Served {
    std::unique_ptr<Transport> transport;
    std::unique_ptr<QueueThread> thread;  // destroyed (joined) before its transport
  };
  using Queue = Served<FuseDeviceTransport>;
  using Ring = Served<FuseRingTransport>;
  std::vector<Queue> queues_;  // fixed once StartQueues() ran
  std::vector<Ring> rings_;    // fixed once StartRings() ran
  // Held while StartRings() adds to rings_ and while a queue whose connection ended stops them:
  // the connection may end while the export starts.
  std::mutex rings_mutex_;
  std::unique_ptr<DeviceBackingFiles> backing_files_;  // with passthrough only
  // Queue threads still serving, plus one held by StartQueues() while it starts them, so that
  // queues ending early cannot tear down an export that is still starting.
  std::atomic<uint32_t> serving_{1};
  std::atomic<bool> stop_requested_{false};
  // Set by the first queue that ends on its own, which stops the others.
  std::atomic<bool> ending_{false};
  std::mutex stop_mutex_;  // serializes Stop()
  std::mutex teardown_mutex_;
  bool torn_down_ = false;
  // INIT's reply delivered (or the connection gone), for WaitForInitReply().
  std::mutex init_mutex_;
  std::condition_variable init_changed_;
  bool init_replied_ = false;
  bool init_wait_over_ = false;
};

// Queues for num-queues=0: one per CPU this process may run on.
uint32_t DefaultFuseQueueCount();

}  // namespace bexd::exports
