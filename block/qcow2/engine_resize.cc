// SPDX-License-Identifier: GPL-2.0-or-later
// Engine: changing the virtual size.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

#include "block/qcow2/engine.h"

namespace bexd::block::qcow2 {

Task<absl::Status> Engine::ShrinkTask(uint64_t new_size, uint64_t old_size) {
  // Every cluster from the first one wholly cut off is freed, its entry cleared so that no backing
  // file shows through if the image grows again, and the rest of the last cluster is zeroed (QEMU
  // grows without clearing it); then the header takes the new size. A crash in between leaves the
  // old size with zeroes past the new end, never a smaller size whose clusters still hold the
  // cut-off data for a later grow to bring back.
  const std::string& name = image_->node_name;
  uint64_t first = g_.cluster_floor(new_size + g_.cluster_size - 1);
  uint64_t end = g_.cluster_floor(old_size + g_.cluster_size - 1);
  // New requests past the new end fail from here on; ChangeClusters waits for allocations under
  // way there.
  image_->size.store(new_size, std::memory_order_release);
  int result = 0;
  if (first > new_size) result = co_await ZeroPartialCluster(new_size, first - new_size);
  if (result == 0 && first < end) result = co_await ChangeClusters(first, end, Change::kDrop);
  if (result == 0) result = co_await Flush();
  if (result < 0) {
    // What was dropped reads as zeroes; the old size would serve that as if it were data.
    co_return absl::ErrnoToStatus(-result, fmt::format("node '{}': cannot free the clusters past "
                                                       "{} bytes; the image stays {} bytes on "
                                                       "disk until a resize succeeds",
                                                       name, new_size, old_size));
  }
  uint8_t bytes[8];
  StoreBe64(bytes, new_size);
  result = co_await WriteHeaderField(field::kSize, bytes, sizeof(bytes));
  if (result == 0) result = co_await io_->Flush();
  if (result < 0) {
    co_return absl::ErrnoToStatus(-result, fmt::format("node '{}': cannot write the new size "
                                                       "to the header",
                                                       name));
  }
  header_.size = new_size;
  // As QEMU, the file gives the space back even where the file child ignores discards, but only
  // once the refcounts the shrink dropped went down, after their grace period. That waits for
  // queue threads, one of which may be the caller, blocked until this returns: the trim runs
  // later, on its own (MaybeTrim).
  trim_after_ = next_batch_;
  MaybeTrim();
  co_return absl::OkStatus();
}

Task<absl::Status> Engine::ResizeTask(uint64_t new_size) {
  co_await resize_mutex_.Lock();
  AsyncLockGuard guard(resize_mutex_);
  const std::string& name = image_->node_name;
  if (image_->read_only) {
    co_return absl::FailedPreconditionError(
        fmt::format("node '{}': cannot resize a read-only image", name));
  }
  if (image_->corrupt.load(std::memory_order_relaxed)) {
    co_return absl::DataLossError(fmt::format("node '{}': cannot resize a corrupt image", name));
  }
  if (new_size > static_cast<uint64_t>(INT64_MAX)) {
    co_return absl::OutOfRangeError(fmt::format("node '{}': size {} is too large", name, new_size));
  }
  if (new_size % kSizeAlignment != 0) {
    co_return absl::InvalidArgumentError(
        fmt::format("node '{}': the new size must be a multiple of {} ({} was asked)", name,
                    kSizeAlignment, new_size));
  }
  uint64_t old_size = image_->size.load(std::memory_order_acquire);
  if (new_size == old_size) co_return absl::OkStatus();
  // A v2 snapshot does not record its disk size, so after a resize QEMU could no longer revert
  // to it; QEMU refuses, and so does bexd.
  if (!snapshots_.empty() && header_.version < 3) {
    co_return absl::UnimplementedError(fmt::format(
        "node '{}': cannot resize a version 2 image that has internal snapshots", name));
  }
  // A version 3 snapshot keeps its own size and its clusters' references, so a shrink frees only
  // what the active layer alone used, as QEMU's does.
  if (new_size < old_size) co_return co_await ShrinkTask(new_size, old_size);

  uint8_t bytes[8];
  StoreBe64(bytes, new_size);
  uint64_t needed = g_.l1_entries_for(new_size);
  if (needed > kMaxL1Bytes / sizeof(uint64_t)) {
    co_return absl::OutOfRangeError(fmt::format(
        "node '{}': {} bytes is too large for {}-byte clusters", name, new_size, g_.cluster_size));
  }
  int result = 0;
  if (needed > header_.l1_size) result = co_await GrowL1(needed);
  // The new part must read as zeroes: clear what is left in the old last cluster (a shrink may
  // have left data there) and hide a backing file that is longer than the old size.
  uint64_t old_cluster_end = g_.cluster_floor(old_size + g_.cluster_size - 1);
  if (result == 0 && old_cluster_end > old_size) {
    result = co_await ZeroPartialCluster(old_size, std::min(new_size, old_cluster_end) - old_size);
  }
  if (result == 0 && image_->backing != nullptr) {
    uint64_t backing_end = std::min(new_size, image_->backing->size());
    if (backing_end > old_cluster_end) {
      result = co_await WriteZeroes(old_cluster_end, backing_end - old_cluster_end, true);
    }
  }
  // The zeroes are durable before the header shows the new size.
  if (result == 0) result = co_await Flush();
  if (result == 0) result = co_await WriteHeaderField(field::kSize, bytes, sizeof(bytes));
  if (result == 0) result = co_await io_->Flush();
  if (result < 0) {
    co_return absl::ErrnoToStatus(
        -result, fmt::format("node '{}': cannot grow the image to {} bytes", name, new_size));
  }
  header_.size = new_size;
  image_->size.store(new_size, std::memory_order_release);
  co_return absl::OkStatus();
}

}  // namespace bexd::block::qcow2
