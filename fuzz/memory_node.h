// SPDX-License-Identifier: GPL-2.0-or-later
// A block node over bytes in memory, for fuzzing format drivers without files: every request
// completes inside Poll() (event_fd() is -1). Safe to use from several threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "block/block_node.h"

namespace bexd::fuzz {

class MemoryNode final : public block::BlockNode, public std::enable_shared_from_this<MemoryNode> {
 public:
  // Grows up to `max_size` bytes through Truncate.
  MemoryNode(std::string node_name, std::vector<uint8_t> bytes, bool read_only, uint64_t max_size);

  std::string driver_name() const override { return "memory"; }
  uint64_t size() const override { return size_.load(std::memory_order_acquire); }
  bool read_only() const override { return read_only_; }
  absl::Status Truncate(uint64_t new_size) override;
  std::string description() const override { return "memory '" + node_name() + "'"; }

  // Runs one request at once; its result.
  int64_t Execute(block::IoRequest* request);

 protected:
  absl::StatusOr<std::unique_ptr<block::IoQueue>> CreateDriverQueue() override;

 private:
  const bool read_only_;
  const uint64_t max_size_;
  std::mutex mutex_;
  std::vector<uint8_t> bytes_;
  std::atomic<uint64_t> size_;
};

}  // namespace bexd::fuzz
