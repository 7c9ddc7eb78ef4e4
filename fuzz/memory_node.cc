// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuzz/memory_node.h"

#include <cerrno>
#include <cstring>

#include "block/iov_util.h"
#include "block/request_check.h"
#include "block/request_list.h"

namespace bexd::fuzz {
namespace {

struct MemoryState : block::RequestLink {
  int64_t result = 0;
};

class MemoryQueue final : public block::IoQueue {
 public:
  explicit MemoryQueue(std::shared_ptr<MemoryNode> node) : node_(std::move(node)) {}

  void Submit(block::IoRequest* request) override {
    block::EmplaceDriverState<MemoryState>(request);
    waiting_.PushBack(request);
    ++in_flight_;
  }
  void Poll() override {
    while (!waiting_.empty()) {
      block::RequestList batch;
      batch.Splice(waiting_);
      while (block::IoRequest* request = batch.PopFront()) {
        int64_t result = node_->Execute(request);
        --in_flight_;
        request->done(request, result);
      }
    }
  }
  int event_fd() const override { return -1; }
  uint32_t in_flight() const override { return in_flight_; }

 private:
  std::shared_ptr<MemoryNode> node_;
  block::RequestList waiting_;
  uint32_t in_flight_ = 0;
};

}  // namespace

MemoryNode::MemoryNode(std::string node_name, std::vector<uint8_t> bytes, bool read_only,
                       uint64_t max_size)
    : BlockNode(std::move(node_name)),
      read_only_(read_only),
      max_size_(max_size),
      bytes_(std::move(bytes)),
      size_(bytes_.size()) {}

absl::Status MemoryNode::Truncate(uint64_t new_size) {
  if (read_only_ || new_size > max_size_) return absl::ResourceExhaustedError("memory node full");
  std::lock_guard lock(mutex_);
  bytes_.resize(new_size);
  size_.store(new_size, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<block::IoQueue>> MemoryNode::CreateDriverQueue() {
  return std::unique_ptr<block::IoQueue>(new MemoryQueue(shared_from_this()));
}

int64_t MemoryNode::Execute(block::IoRequest* request) {
  std::lock_guard lock(mutex_);
  int error = block::CheckRequest(*request, bytes_.size(), read_only_);
  if (error != 0) return error;
  uint8_t* at = bytes_.data() + request->offset;
  switch (request->op) {
    case block::IoOp::kRead:
      block::IovCursor(request->iov, request->iovcnt, 0).CopyIn(at, request->length);
      return static_cast<int64_t>(request->length);
    case block::IoOp::kWrite:
      block::IovCursor(request->iov, request->iovcnt, 0).CopyOut(at, request->length);
      return static_cast<int64_t>(request->length);
    case block::IoOp::kDiscard:
    case block::IoOp::kWriteZeroes:
      std::memset(at, 0, request->length);
      return static_cast<int64_t>(request->length);
    case block::IoOp::kBlockStatus:
      request->status_data = true;
      if (request->offset >= bytes_.size()) return 0;
      return static_cast<int64_t>(
          std::min<uint64_t>(request->length, bytes_.size() - request->offset));
    case block::IoOp::kFlush:
      return 0;
    default:
      return -EOPNOTSUPP;
  }
}

}  // namespace bexd::fuzz
