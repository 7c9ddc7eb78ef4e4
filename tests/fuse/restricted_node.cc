// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/fuse/restricted_node.h"

#include <gtest/gtest.h>

namespace bexd::fuse::testing {
namespace {

class RestrictedQueue final : public block::IoQueue {
 public:
  RestrictedQueue(RestrictedNode* node, std::unique_ptr<block::IoQueue> real)
      : node_(node), real_(std::move(real)) {}

  void Submit(block::IoRequest* request) override {
    node_->Record(*request);
    node_->BeforeSubmit(*request);
    real_->Submit(request);
  }
  void Poll() override { real_->Poll(); }
  int event_fd() const override { return real_->event_fd(); }
  uint32_t in_flight() const override { return real_->in_flight(); }

 private:
  RestrictedNode* node_;
  std::unique_ptr<block::IoQueue> real_;
};

}  // namespace

RestrictedNode::RestrictedNode(std::shared_ptr<block::BlockNode> real,
                               block::Capabilities capabilities, uint32_t request_alignment)
    : BlockNode("restricted0"),
      real_(std::move(real)),
      capabilities_(capabilities),
      request_alignment_(request_alignment) {}

absl::Status RestrictedNode::Truncate(uint64_t new_size) {
  ++truncate_calls_;
  return real_->Truncate(new_size);
}

void RestrictedNode::BeforeSubmit(const block::IoRequest& request) {
  if (request.op != block::IoOp::kWrite || !shrink_before_write_) return;
  EXPECT_TRUE(real_->Truncate(*shrink_before_write_).ok());
  shrink_before_write_.reset();
}

absl::StatusOr<std::unique_ptr<block::IoQueue>> RestrictedNode::CreateDriverQueue() {
  absl::StatusOr<std::unique_ptr<block::IoQueue>> real = real_->CreateQueue();
  if (!real.ok()) return real.status();
  return std::unique_ptr<block::IoQueue>(new RestrictedQueue(this, *std::move(real)));
}

}  // namespace bexd::fuse::testing
