// SPDX-License-Identifier: GPL-2.0-or-later
// Blocking I/O on a child node for the control path (opening an image, repairing its refcounts):
// a queue of the calling thread, driven until each request completes.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>

#include "block/block_node.h"

namespace bexd::block::qcow2 {

class SyncIo {
 public:
  static absl::StatusOr<std::unique_ptr<SyncIo>> Create(BlockNode& node);

  // Each returns 0 or -errno (a short transfer is -EIO).
  int Read(uint64_t offset, void* buffer, uint64_t length);
  int Write(uint64_t offset, const void* buffer, uint64_t length);
  int Flush();

 private:
  explicit SyncIo(std::unique_ptr<IoQueue> queue) : queue_(std::move(queue)) {}
  int64_t Run(IoRequest* request);
  int Transfer(IoOp op, uint64_t offset, void* buffer, uint64_t length);

  std::unique_ptr<IoQueue> queue_;
};

}  // namespace bexd::block::qcow2
