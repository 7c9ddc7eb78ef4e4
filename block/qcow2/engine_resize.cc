// SPDX-License-Identifier: GPL-2.0-or-later
// Engine: changing the virtual size.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

#include "block/qcow2/engine.h"

namespace bexd::block::qcow2 {

Task<absl::Status> Engine::CheckUnallocatedFrom(uint64_t offset, uint64_t old_size) {
  // Shrinking must not lose data: every cluster from the first one wholly cut off must be
  // unallocated (QEMU refuses likewise rather than lose data silently).
  uint64_t first = g_.cluster_floor(offset + g_.cluster_size - 1);
  for (uint64_t position = first; position < old_size;) {
    uint64_t l1_index = g_.l1_index(position);
    uint64_t table_end = (l1_index + 1) << (g_.cluster_bits + g_.l2_bits);
    uint64_t end = std::min(old_size, table_end);
    int64_t slab = co_await AcquireTable(l1_index);
    if (slab == -ENOENT) {
      position = end;
      continue;
    }
    if (slab < 0) {
      co_return absl::ErrnoToStatus(static_cast<int>(-slab),
                                    fmt::format("node '{}': cannot read the L2 table for guest "
                                                "offset {}",
                                                image_->node_name, position));
    }
    for (; position < end; position += g_.cluster_size) {
      uint64_t entry = image_->tables->entry(static_cast<uint32_t>(slab), g_.l2_index(position));
      Mapping mapping = ClassifyEntry(g_, entry);
      if (mapping.kind != ClusterKind::kUnallocated &&
          !(mapping.kind == ClusterKind::kZero && mapping.host == 0)) {
        ReleaseTable(slab);
        co_return absl::FailedPreconditionError(fmt::format(
            "node '{}': cannot shrink the image to {} bytes: guest offset {} is allocated (discard "
            "it first)",
            image_->node_name, offset, position));
      }
    }
    ReleaseTable(slab);
  }
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
    co_return absl::InvalidArgumentError(
        fmt::format("node '{}': size {} is too large", name, new_size));
  }
  uint64_t old_size = image_->size.load(std::memory_order_acquire);
  if (new_size == old_size) co_return absl::OkStatus();
  uint8_t bytes[8];
  StoreBe64(bytes, new_size);
  if (new_size < old_size) {
    if (!snapshots_.empty()) {
      co_return absl::FailedPreconditionError(
          fmt::format("node '{}': cannot shrink an image with internal snapshots", name));
    }
    // New requests past the new end fail from here on; then make sure nothing is lost.
    image_->size.store(new_size, std::memory_order_release);
    absl::Status status = co_await CheckUnallocatedFrom(new_size, old_size);
    if (!status.ok()) {
      image_->size.store(old_size, std::memory_order_release);
      co_return status;
    }
    int result = co_await WriteHeaderField(field::kSize, bytes, sizeof(bytes));
    if (result == 0) result = co_await io_->Flush();
    if (result < 0) {
      image_->size.store(old_size, std::memory_order_release);
      co_return absl::ErrnoToStatus(-result, fmt::format("node '{}': cannot write the new size "
                                                         "to the header",
                                                         name));
    }
    header_.size = new_size;
    co_return absl::OkStatus();
  }

  uint64_t needed = g_.l1_entries_for(new_size);
  if (needed > kMaxL1Bytes / sizeof(uint64_t)) {
    co_return absl::InvalidArgumentError(fmt::format(
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
