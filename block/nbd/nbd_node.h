// SPDX-License-Identifier: GPL-2.0-or-later
// The `nbd` driver (QEMU's): a client of an NBD server through libnbd. When the server allows
// multi-conn, every queue thread gets a connection of its own (NbdOwnQueue); otherwise the node
// has one connection, driven by its own thread (NbdConnectionThread, NbdSharedQueue). A lost
// server is reconnected to by NbdConnector; nbd_connection.h has the rules.
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <mutex>
#include <string>

#include "block/block_node.h"
#include "block/nbd/nbd_connection.h"
#include "block/nbd/nbd_connection_thread.h"
#include "block/nbd/nbd_connector.h"
#include "block/options.h"

namespace bexd::block {

class NbdNode final : public BlockNode, public std::enable_shared_from_this<NbdNode> {
 public:
  // Connects once (failing if the server cannot be reached, as QEMU with open-timeout=0) to learn
  // the export's size and what the server offers.
  static absl::StatusOr<std::shared_ptr<NbdNode>> Open(std::string node_name,
                                                       const NbdOptions& options, bool read_only);
  ~NbdNode() override;

  std::string driver_name() const override { return "nbd"; }
  uint64_t size() const override { return link_.opened.size; }
  bool read_only() const override { return read_only_; }
  // The server's minimum block size; without one, QEMU's assumption (1 when the server reports
  // block status, else 512).
  uint32_t request_alignment() const override;
  // What the server offered at open: trim (used only with discard=unmap), base:allocation block
  // status, flush. Write-zeroes and FUA always work (written zeroes, a flush after the write where
  // the server lacks them); the size is the server's.
  Capabilities capabilities() const override;
  // An NBD export's size is the server's: only "resizing" to the same size succeeds, as in QEMU.
  absl::Status Truncate(uint64_t new_size) override;
  std::string description() const override;
  std::string filename() const override { return NbdFilename(link_.options); }

  // One connection per queue thread (the server allows multi-conn) or one shared connection.
  bool multi_conn() const { return connection_thread_ == nullptr; }

 protected:
  absl::StatusOr<std::unique_ptr<IoQueue>> CreateDriverQueue() override;

 private:
  NbdNode(std::string node_name, const NbdOptions& options, const NbdServerInfo& opened,
          bool read_only);
  // The connection made at open, if unused and still open, else a new one.
  absl::StatusOr<NbdHandle> QueueConnection();

  NbdNodeLink link_;
  const bool read_only_;
  std::unique_ptr<NbdConnector> connector_;  // declared before the connections that use it
  std::unique_ptr<NbdConnectionThread> connection_thread_;  // single-connection servers
  std::mutex spare_mutex_;
  NbdHandle spare_;  // multi-conn: the connection made at open, for the first queue
};

}  // namespace bexd::block
