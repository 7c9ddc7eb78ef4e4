// SPDX-License-Identifier: GPL-2.0-or-later
// The vhost-user-fs export: serves one block node to a VM as a virtio-fs directory holding the
// image, over a vhost-user unix socket. One socket thread listens, serves one frontend at a time
// and accepts the next one after a disconnect; one queue thread per virtqueue (the hiprio queue
// and each request queue) runs the FUSE request core on guest memory. See docs/vhost-user-fs.md.
#pragma once

#include <absl/status/statusor.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "block/block_node.h"
#include "export/export.h"
#include "export/options.h"
#include "export/vhost_user/vhost_user_device.h"
#include "export/vhost_user/vring_queue.h"
#include "fuse/session.h"
#include "util/unique_fd.h"
#include "util/unix_socket_listener.h"

namespace bexd::exports {

class VhostUserFsExport final : public Export {
 public:
  // QEMU's vhost-user-fs-pci takes up to this many request queues per device.
  static constexpr uint32_t kMaxRequestQueues = 64;

  // Creates the socket and the queue threads; returns once the socket listens. Through
  // StartExport(), which checks the shared options and creates `session`.
  static absl::StatusOr<std::unique_ptr<VhostUserFsExport>> Start(
      const ExportOptions& options, std::shared_ptr<block::BlockNode> node,
      std::shared_ptr<fuse::Session> session);
  ~VhostUserFsExport() override;

  std::string type() const override { return "vhost-user-fs"; }
  void Stop() override;
  bool in_use() const override { return connected_.load(std::memory_order_relaxed); }
  std::vector<fuse::QueueStatsSnapshot> Stats() const override;

 private:
  VhostUserFsExport(const ExportOptions& options, std::shared_ptr<block::BlockNode> node,
                    std::shared_ptr<fuse::Session> session);

  absl::Status Listen();
  void ServeConnections();
  // Takes a new frontend, or refuses it while another is connected.
  void Accept();
  // Reads and answers one message; false if the connection must close.
  bool ServeMessage();
  void Disconnect();

  const std::string socket_path_;
  const std::string tag_;
  const std::shared_ptr<fuse::Session> session_;
  std::vector<std::unique_ptr<VringQueue>> queues_;
  std::unique_ptr<VhostUserDevice> device_;
  UnixSocketListener listener_;
  util::UniqueFd stop_fd_;        // an eventfd: readable once Stop() begins
  util::UniqueFd connection_fd_;  // the socket thread's only
  bool listener_stuck_ = false;   // out of descriptors, none in reserve: the socket thread's only
  std::atomic<bool> connected_{false};
  std::thread thread_;
  std::mutex stop_mutex_;
  bool stopped_ = false;
};

}  // namespace bexd::exports
