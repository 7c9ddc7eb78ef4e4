// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/uring_ring.h"

#include <fmt/format.h>
#include <linux/falloc.h>
#include <linux/fs.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <fstream>
#include <string>

#include "util/log.h"
#include "util/rate_limit.h"

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

// The kernel's limit on registered buffers per ring (IORING_MAX_REG_BUFFERS).
constexpr size_t kMaxFixedBuffers = 1u << 14;
// Registration grows in steps of at least this, so small requests need few register calls.
constexpr size_t kMinRegisteredBytes = 8192;

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

void UringRing::UseBuffers(std::span<const struct iovec> regions) {
  if (!regions_.empty()) {
    io_uring_unregister_buffers(&ring_);
    regions_.clear();
  }
  if (regions.empty() || regions.size() > kMaxFixedBuffers) return;
  // A sparse table (Linux 5.19): each region is registered when a request first uses it.
  int error = io_uring_register_buffers_sparse(&ring_, static_cast<unsigned>(regions.size()));
  if (error < 0) {
    log::Debug("io_uring: no registered buffers ({}); request pages are mapped per request",
               std::strerror(-error));
    return;
  }
  regions_.reserve(regions.size());
  for (const struct iovec& region : regions) {
    regions_.push_back({reinterpret_cast<uintptr_t>(region.iov_base), region.iov_len, 0, false});
  }
}

int UringRing::FixedBufferFor(const struct iovec& iov) {
  const auto start = reinterpret_cast<uintptr_t>(iov.iov_base);
  // The last region that starts at or before the data.
  auto after =
      std::upper_bound(regions_.begin(), regions_.end(), start,
                       [](uintptr_t address, const Region& r) { return address < r.start; });
  if (after == regions_.begin()) return -1;
  Region& region = *(after - 1);
  const size_t reach = start - region.start + iov.iov_len;
  if (region.refused || reach > region.length) return -1;
  const auto index = static_cast<int>(after - 1 - regions_.begin());
  if (reach <= region.registered) return index;
  // Pinning faults the pages in: register about as far as requests reach, not the whole region.
  const size_t grown = std::min(region.length, std::bit_ceil(std::max(reach, kMinRegisteredBytes)));
  struct iovec buffer = {reinterpret_cast<void*>(region.start), grown};
  int error = io_uring_register_buffers_update_tag(&ring_, static_cast<unsigned>(index), &buffer,
                                                   nullptr, 1);
  if (error < 0) {
    region.refused = true;
    static log::RateLimit limit;
    log::Limited(limit, log::Level::kWarn,
                 "io_uring: cannot register {} bytes of request buffers ({}); their pages are "
                 "mapped per request instead",
                 grown, std::strerror(-error));
    return -1;
  }
  region.registered = grown;
  return index;
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
    case IoOp::kWrite: {
      const bool read = request->op == IoOp::kRead;
      // A fixed-buffer op takes one buffer: requests in one segment, the common case.
      const int fixed =
          request->iovcnt == 1 && !regions_.empty() ? FixedBufferFor(request->iov[0]) : -1;
      if (fixed >= 0) {
        const struct iovec& iov = request->iov[0];
        const auto length = static_cast<unsigned>(iov.iov_len);
        if (read) {
          io_uring_prep_read_fixed(sqe, fd, iov.iov_base, length, offset, fixed);
        } else {
          io_uring_prep_write_fixed(sqe, fd, iov.iov_base, length, offset, fixed);
        }
      } else if (read) {
        io_uring_prep_readv(sqe, fd, request->iov, static_cast<unsigned>(request->iovcnt), offset);
      } else {
        io_uring_prep_writev(sqe, fd, request->iov, static_cast<unsigned>(request->iovcnt), offset);
      }
      if (!read && (request->flags & kIoFua)) sqe->rw_flags = RWF_DSYNC;
      break;
    }
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
