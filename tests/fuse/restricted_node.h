// SPDX-License-Identifier: GPL-2.0-or-later
// A node over a real one that says it can do less (capabilities and request alignment of the
// test's choosing) and records the block requests that reach it. It shows how the core answers
// from capabilities that no driver here lacks (FUA, write-zeroes) or alignments none has (64 KiB);
// the I/O itself is the real node's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "block/block_node.h"

namespace bexd::fuse::testing {

struct SeenRequest {
  block::IoOp op;
  uint32_t flags;
};

class RestrictedNode final : public block::BlockNode {
 public:
  RestrictedNode(std::shared_ptr<block::BlockNode> real, block::Capabilities capabilities,
                 uint32_t request_alignment);

  std::string driver_name() const override { return "restricted"; }
  uint64_t size() const override { return real_->size(); }
  bool read_only() const override { return real_->read_only(); }
  uint32_t request_alignment() const override { return request_alignment_; }
  block::Capabilities capabilities() const override { return capabilities_; }
  absl::Status Truncate(uint64_t new_size) override;
  std::string description() const override { return "restricted " + real_->description(); }

  // What the core submitted, in order, and how often it asked to resize. One test thread only.
  const std::vector<SeenRequest>& seen() const { return seen_; }
  int truncate_calls() const { return truncate_calls_; }
  void Record(const block::IoRequest& request) { seen_.push_back({request.op, request.flags}); }
  // The next WRITE first shrinks the real node to `size`, as another client's truncate landing
  // between the core's size check and the node's would.
  void ShrinkBeforeNextWrite(uint64_t size) { shrink_before_write_ = size; }
  void BeforeSubmit(const block::IoRequest& request);

 protected:
  absl::StatusOr<std::unique_ptr<block::IoQueue>> CreateDriverQueue() override;

 private:
  const std::shared_ptr<block::BlockNode> real_;
  const block::Capabilities capabilities_;
  const uint32_t request_alignment_;
  std::vector<SeenRequest> seen_;
  int truncate_calls_ = 0;
  std::optional<uint64_t> shrink_before_write_;
};

}  // namespace bexd::fuse::testing
