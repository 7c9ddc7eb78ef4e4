// SPDX-License-Identifier: GPL-2.0-or-later
// QEMU's detect-zeroes in front of any driver's queue: a write whose data is all zeroes goes to
// the driver as a write-zeroes request instead (block.md, "detect-zeroes").
#pragma once

#include <cstdint>
#include <memory>

#include "block/block_node.h"

namespace bexd::block {

class DetectZeroesQueue final : public IoQueue {
 public:
  // `zero_flags`: what a detected write-zeroes request carries (kIoMayUnmap for unmap, else 0).
  DetectZeroesQueue(std::unique_ptr<IoQueue> driver, uint32_t zero_flags)
      : driver_(std::move(driver)), zero_flags_(zero_flags) {}

  // Turns a write of zeroes into kWriteZeroes in place (as a format driver shifts offsets in
  // place), then hands every request to the driver's queue. FUA writes pass unchanged: drivers
  // make kWriteZeroes durable only at the next flush.
  void Submit(IoRequest* request) override;
  void Poll() override { driver_->Poll(); }
  int event_fd() const override { return driver_->event_fd(); }
  void AppendWaitFds(std::vector<int>* fds) const override { driver_->AppendWaitFds(fds); }
  uint32_t in_flight() const override { return driver_->in_flight(); }
  void UseBuffers(std::span<const struct iovec> regions) override { driver_->UseBuffers(regions); }
  void SetEdgeTriggeredWaiter() override { driver_->SetEdgeTriggeredWaiter(); }

 private:
  std::unique_ptr<IoQueue> driver_;
  const uint32_t zero_flags_;
};

}  // namespace bexd::block
