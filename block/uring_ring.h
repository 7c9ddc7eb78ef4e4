// SPDX-License-Identifier: GPL-2.0-or-later
// One queue thread's io_uring (aio=io_uring): the file driver's asynchronous engine that carries
// reads, writes, fdatasync and, on regular files, the fallocate behind discard and write-zeroes.
// The FileQueue that creates it owns it and is its only user, so it takes no lock; requests need
// no memory of their own (the SQE carries the IoRequest pointer back in the CQE). Completions
// signal the queue's eventfd, and are reaped on the queue thread in Poll().
#pragma once

#include <absl/status/statusor.h>
#include <liburing.h>

#include <cstdint>
#include <memory>

#include "block/file_node.h"
#include "block/io_request.h"

namespace bexd::block {

class UringRing {
 public:
  // A ring with room for `entries` requests at once; completions signal event_fd (none if -1).
  // The error says why when the kernel refuses io_uring (too old, or io_uring_disabled set).
  static absl::StatusOr<std::unique_ptr<UringRing>> Create(uint32_t entries, int event_fd);
  // Waits for every request the kernel has taken: their buffers are the caller's to free after.
  ~UringRing();
  UringRing(const UringRing&) = delete;
  UringRing& operator=(const UringRing&) = delete;

  // Whether the ring carries `request`'s op on `node`: reads and writes (the queue sends the
  // ones O_DIRECT can take without a bounce buffer), flushes, and on regular files the fallocate
  // of discard and write-zeroes. Block devices discard and zero through ioctls, on workers.
  static bool Carries(const IoRequest& request, const FileNode& node);
  // Fills an SQE for `request`, which the ring Carries(). False if the SQ ring is full.
  bool Prepare(IoRequest* request, const FileNode& node);
  // Hands every prepared SQE to the kernel. Negative errno if it took none (they stay prepared
  // and go with the next call).
  int Submit();
  // Calls on_complete(request, result) for each completion there is, without waiting; returns how
  // many.
  template <typename OnComplete>
  uint32_t Reap(OnComplete&& on_complete) {
    unsigned head;
    struct io_uring_cqe* cqe;
    uint32_t count = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      on_complete(static_cast<IoRequest*>(io_uring_cqe_get_data(cqe)), int64_t{cqe->res});
      ++count;
    }
    io_uring_cq_advance(&ring_, count);
    in_ring_ -= count;
    return count;
  }

 private:
  UringRing() = default;

  struct io_uring ring_ = {};
  bool initialized_ = false;
  uint32_t in_ring_ = 0;  // prepared and not yet completed
};

}  // namespace bexd::block
