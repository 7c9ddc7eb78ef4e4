// SPDX-License-Identifier: GPL-2.0-or-later
// A queue thread's I/O context on an nbd node whose server allows multi-conn: the thread's own
// connection, driven from Poll(); its event_fd() is the connection's wait_fd().
#pragma once

#include <memory>

#include "block/block_node.h"
#include "block/nbd/nbd_connection.h"

namespace bexd::block {

class NbdOwnQueue final : public IoQueue {
 public:
  // `connection` must have been created with OnFinished.
  NbdOwnQueue(std::shared_ptr<const BlockNode> node, std::unique_ptr<NbdConnection> connection)
      : node_(std::move(node)), connection_(std::move(connection)) {}

  void Submit(IoRequest* request) override;
  void Poll() override { connection_->Process(); }
  int event_fd() const override { return connection_->wait_fd(); }
  uint32_t in_flight() const override { return connection_->in_flight(); }

  static void OnFinished(void* context, IoRequest* request, int64_t result);

 private:
  std::shared_ptr<const BlockNode> node_;
  std::unique_ptr<NbdConnection> connection_;
};

}  // namespace bexd::block
