// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/block_node.h"

#include "block/detect_zeroes_queue.h"

namespace bexd::block {

const char* DetectZeroesName(DetectZeroes mode) {
  switch (mode) {
    case DetectZeroes::kOff:
      return "off";
    case DetectZeroes::kOn:
      return "on";
    case DetectZeroes::kUnmap:
      return "unmap";
  }
  return "off";
}

absl::Status BlockNode::Resize(uint64_t new_size) {
  std::lock_guard lock(size_change_mutex_);
  if (size() == new_size) return absl::OkStatus();
  return Truncate(new_size);
}

absl::Status BlockNode::GrowTo(uint64_t end) {
  std::lock_guard lock(size_change_mutex_);
  if (size() >= end) return absl::OkStatus();
  return Truncate(end);
}

// detect-zeroes lives here, above every driver, so that each driver gets it without code of its
// own, as in QEMU (bdrv_aligned_pwritev). With it off (the default) the driver's queue is
// returned as it is: the hot path then has no extra call and no zero check at all. As in QEMU it
// is skipped for a node that cannot write zeroes, and unmap asks the driver for kIoMayUnmap,
// which a driver without discard=unmap ignores, so there unmap acts as on.
absl::StatusOr<std::unique_ptr<IoQueue>> BlockNode::CreateQueue() {
  absl::StatusOr<std::unique_ptr<IoQueue>> queue = CreateDriverQueue();
  if (!queue.ok() || detect_zeroes_ == DetectZeroes::kOff || !capabilities().write_zeroes) {
    return queue;
  }
  const uint32_t zero_flags = detect_zeroes_ == DetectZeroes::kUnmap ? kIoMayUnmap : 0u;
  return std::unique_ptr<IoQueue>(new DetectZeroesQueue(*std::move(queue), zero_flags));
}

}  // namespace bexd::block
