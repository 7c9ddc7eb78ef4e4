// SPDX-License-Identifier: GPL-2.0-or-later
// One queue thread's io_uring (aio=io_uring): the file driver's asynchronous engine that carries
// reads, writes, fdatasync and, on regular files, the fallocate behind discard and write-zeroes.
// The FileQueue that creates it owns it and is its only user, so it takes no lock; requests need
// no memory of their own (the SQE carries the IoRequest pointer back in the CQE). Completions
// signal the queue's eventfd, and are reaped on the queue thread in Poll().
//
// Registered buffers: the caller may name the memory its request data lives in (UseBuffers()).
// The ring registers each region with the kernel the first time a read or write uses it, only as
// far as requests have reached into it (doubling as they reach further), so pinned memory stays
// close to what requests touch anyway; a request in a registered region then goes as
// READ_FIXED/WRITE_FIXED and the kernel skips mapping its pages. A refusal (RLIMIT_MEMLOCK, a
// kernel without sparse registration) leaves those requests on the plain path.
#pragma once

#include <absl/status/statusor.h>
#include <liburing.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

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
  // Data of later reads and writes that lies in one of `regions` (sorted, disjoint) goes through
  // registered buffers; replaces the regions of an earlier call, and empty forgets them. Only
  // while nothing is in the ring.
  void UseBuffers(std::span<const struct iovec> regions);
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
  struct Region {
    uintptr_t start;
    size_t length;
    size_t registered;  // bytes from start the kernel has as fixed buffer `index`
    bool refused;       // the kernel refused to register it: never try again
  };

  UringRing() = default;
  // The fixed-buffer index that covers `iov` (registering more of its region if needed), or -1.
  int FixedBufferFor(const struct iovec& iov);

  struct io_uring ring_ = {};
  bool initialized_ = false;
  uint32_t in_ring_ = 0;         // prepared and not yet completed
  std::vector<Region> regions_;  // index in the vector = fixed-buffer index
};

}  // namespace bexd::block
