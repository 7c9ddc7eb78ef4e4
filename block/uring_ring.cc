// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/uring_ring.h"

#include <fmt/format.h>
#include <linux/falloc.h>
#include <linux/fs.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "util/log.h"

namespace bexd::block {
namespace {

// What the kernel's refusal of io_uring_setup means, for the user who asked for aio=io_uring.
std::string RefusalReason(int error) {
  if (error == ENOSYS) return "this kernel has no io_uring";
  if (error == EPERM) {
    std::string disabled = "?";
    std::ifstream("/proc/sys/kernel/io_uring_disabled") >> disabled;
    return fmt::format(
        "the kernel refuses io_uring to this process (kernel.io_uring_disabled = {})", disabled);
  }
  return "io_uring_setup failed";
}

}  // namespace

absl::StatusOr<std::unique_ptr<UringRing>> UringRing::Create(uint32_t entries, int event_fd) {
  std::unique_ptr<UringRing> ring(new UringRing());
  // SUBMIT_ALL (Linux 5.18): an SQE the kernel rejects does not hold back the ones after it.
  int error = io_uring_queue_init(entries, &ring->ring_, IORING_SETUP_SUBMIT_ALL);
  if (error == -EINVAL) error = io_uring_queue_init(entries, &ring->ring_, 0);
  if (error < 0) {
    return absl::ErrnoToStatus(-error, fmt::format("cannot use aio=io_uring: {}; use aio=native "
                                                   "or aio=threads",
                                                   RefusalReason(-error)));
  }
  ring->initialized_ = true;
  if (event_fd >= 0) {
    error = io_uring_register_eventfd(&ring->ring_, event_fd);
    if (error < 0) {
      return absl::ErrnoToStatus(-error, "cannot register the completion eventfd with io_uring");
    }
  }
  return ring;
}

UringRing::~UringRing() {
  if (!initialized_) return;
  // Prepared SQEs the kernel never took are dropped with the ring; wait for the others.
  uint32_t taken = in_ring_ - io_uring_sq_ready(&ring_);
  while (taken > 0) {
    struct io_uring_cqe* cqe = nullptr;
    int error = io_uring_wait_cqe(&ring_, &cqe);
    if (error == -EINTR) continue;
    if (error < 0) {
      log::Error("io_uring: cannot wait for {} requests in the kernel: {}", taken,
                 std::strerror(-error));
      break;
    }
    io_uring_cqe_seen(&ring_, cqe);
    --taken;
  }
  io_uring_queue_exit(&ring_);
}

bool UringRing::Carries(const IoRequest& request, const FileNode& node) {
  switch (request.op) {
    case IoOp::kRead:
    case IoOp::kWrite:
    case IoOp::kFlush:
      return true;
    case IoOp::kDiscard:
    case IoOp::kWriteZeroes:
      return !node.is_block_device();
    case IoOp::kBlockStatus:
    case IoOp::kAllocate:
      return false;
  }
  return false;
}

bool UringRing::Prepare(IoRequest* request, const FileNode& node) {
  struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) return false;
  const int fd = node.fd();
  const auto offset = static_cast<__u64>(request->offset);
  switch (request->op) {
    case IoOp::kRead:
      io_uring_prep_readv(sqe, fd, request->iov, static_cast<unsigned>(request->iovcnt), offset);
      break;
    case IoOp::kWrite:
      io_uring_prep_writev(sqe, fd, request->iov, static_cast<unsigned>(request->iovcnt), offset);
      if (request->flags & kIoFua) sqe->rw_flags = RWF_DSYNC;
      break;
    case IoOp::kFlush:
      io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
      break;
    case IoOp::kDiscard:
      io_uring_prep_fallocate(sqe, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                              request->length);
      break;
    case IoOp::kWriteZeroes: {
      const bool unmap =
          (request->flags & kIoMayUnmap) && node.options().discard == DiscardMode::kUnmap;
      io_uring_prep_fallocate(
          sqe, fd, (unmap ? FALLOC_FL_PUNCH_HOLE : FALLOC_FL_ZERO_RANGE) | FALLOC_FL_KEEP_SIZE,
          offset, request->length);
      break;
    }
    case IoOp::kBlockStatus:
    case IoOp::kAllocate:
      break;  // not Carries()
  }
  io_uring_sqe_set_data(sqe, request);
  ++in_ring_;
  return true;
}

int UringRing::Submit() {
  for (;;) {
    int submitted = io_uring_submit(&ring_);
    if (submitted != -EINTR) return submitted;
  }
}

}  // namespace bexd::block
