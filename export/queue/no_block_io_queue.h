// SPDX-License-Identifier: GPL-2.0-or-later
// The IoQueue of a queue thread that serves no block I/O: vhost-user-fs's hiprio queue, which a
// guest uses only for FORGET and INTERRUPT. It holds no backend resources (no libaio context, no
// worker threads); a request that needs the node anyway (a guest that sends READ on the hiprio
// queue) fails with EIO from the next Poll().
#pragma once

#include <cstdint>
#include <string>

#include "block/block_node.h"
#include "block/request_list.h"

namespace bexd::exports {

class NoBlockIoQueue final : public block::IoQueue {
 public:
  explicit NoBlockIoQueue(std::string label) : label_(std::move(label)) {}

  void Submit(block::IoRequest* request) override;
  void Poll() override;
  int event_fd() const override { return -1; }  // everything completes within Poll()
  uint32_t in_flight() const override { return in_flight_; }

 private:
  const std::string label_;
  block::RequestList refused_;
  uint32_t in_flight_ = 0;
};

}  // namespace bexd::exports
