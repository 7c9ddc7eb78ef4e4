// SPDX-License-Identifier: GPL-2.0-or-later
// Engine: writing the caches back in an order that keeps the image consistent at every point,
// flushes, the header's dirty bit, and closing.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "block/qcow2/engine.h"
#include "util/log.h"

namespace bexd::block::qcow2 {

void Engine::MetadataChanged() {
  image_->metadata_clean.store(false, std::memory_order_release);
  ++change_count_;
}

uint64_t Engine::IncompatibleOnDisk() const {
  return (header_.incompatible_features & ~kIncompatDirty) |
         (dirty_bit_on_disk_ ? kIncompatDirty : 0);
}

Task<int> Engine::MarkDirtyBit() {
  dirty_bit_on_disk_ = true;
  uint8_t bytes[8];
  StoreBe64(bytes, IncompatibleOnDisk());
  int result = co_await io_->Write(field::kIncompatibleFeatures, bytes, sizeof(bytes));
  if (result == 0) result = co_await io_->Flush();
  if (result < 0) dirty_bit_on_disk_ = false;
  co_return result;
}

Task<int> Engine::WriteHeaderField(uint32_t offset, const void* bytes, uint32_t length) {
  co_return co_await io_->Write(offset, bytes, length);
}

Task<int> Engine::WriteDirtyRefblocks() {
  co_await writeback_mutex_.Lock();
  AsyncLockGuard guard(writeback_mutex_);
  co_return co_await WriteDirtyRefblocksLocked();
}

Task<int> Engine::WriteDirtyRefblocksLocked() {
  // Refcount blocks may go to disk at any time: increases precede every reference, and decreases
  // are applied only once the dropped reference is durable.
  std::vector<RefcountCache::Block*> blocks = refblocks_.Dirty();
  if (blocks.empty()) co_return 0;
  std::vector<std::unique_ptr<uint8_t[]>> copies;
  std::vector<ChildIo::Piece> pieces;
  for (RefcountCache::Block* block : blocks) {
    auto copy = std::make_unique<uint8_t[]>(g_.cluster_size);
    std::memcpy(copy.get(), block->data.get(), g_.cluster_size);
    pieces.push_back({block->offset, copy.get(), g_.cluster_size});
    copies.push_back(std::move(copy));
    block->dirty = false;
    ++block->writing;
  }
  int result = co_await io_->WriteAll(pieces);
  for (RefcountCache::Block* block : blocks) {
    --block->writing;
    if (result < 0) block->dirty = true;
  }
  slab_released_.WakeAll();
  co_return result;
}

Task<int> Engine::RunCycle() {
  if (image_->corrupt.load(std::memory_order_relaxed)) co_return -EIO;
  TableCache& tables = *image_->tables;
  // Take everything that is dirty now; what changes from here on waits for the next cycle.
  std::vector<uint32_t> slabs;
  std::vector<std::unique_ptr<uint8_t[]>> slab_copies;
  std::vector<ChildIo::Piece> table_pieces;
  for (uint32_t i = 0; i < tables.slab_count(); ++i) {
    TableCache::Slab& slab = tables.slab(i);
    if (!slab.dirty) continue;
    auto copy = std::make_unique<uint8_t[]>(g_.cluster_size);
    tables.Serialize(i, copy.get());
    table_pieces.push_back(
        {slab.table_offset.load(std::memory_order_relaxed), copy.get(), g_.cluster_size});
    slab_copies.push_back(std::move(copy));
    slab.dirty = false;
    ++slab.writing;
    slabs.push_back(i);
  }
  std::vector<std::pair<uint64_t, uint64_t>> l1_entries;
  for (uint64_t index : l1_dirty_) l1_entries.emplace_back(index, tables.l1_entry(index));
  l1_dirty_.clear();
  std::vector<Decrease> decreases = std::move(decreases_);
  decreases_.clear();
  bool data = data_since_sync_;
  data_since_sync_ = false;
  bool references = !table_pieces.empty() || !l1_entries.empty();

  int result = 0;
  if (config_.lazy_refcounts && references && !dirty_bit_on_disk_) {
    // Refcounts may lag behind the tables on disk from now on; the dirty bit says so.
    result = co_await MarkDirtyBit();
  }
  bool wrote_refblocks = !refblocks_.Dirty().empty();
  if (result == 0) result = co_await WriteDirtyRefblocksLocked();
  // Refcounts (unless lazy) and data before the L2 entries that point to them.
  bool sync = data || (wrote_refblocks && !config_.lazy_refcounts);
  if (result == 0 && references && sync) result = co_await io_->Flush();
  if (result == 0 && !table_pieces.empty()) result = co_await io_->WriteAll(table_pieces);
  if (result == 0 && !l1_entries.empty()) {
    // L2 tables before the L1 entries that point to them.
    if (!table_pieces.empty() || data) result = co_await io_->Flush();
    std::vector<uint8_t> bytes(l1_entries.size() * 8);
    std::vector<ChildIo::Piece> pieces;
    for (size_t i = 0; i < l1_entries.size(); ++i) {
      StoreBe64(bytes.data() + i * 8, l1_entries[i].second);
      pieces.push_back(
          {header_.l1_table_offset + l1_entries[i].first * 8, bytes.data() + i * 8, 8});
    }
    if (result == 0) result = co_await io_->WriteAll(pieces);
    if (result == 0) {
      for (const auto& [index, value] : l1_entries) l1_disk_[index] = value;
    }
  }
  if (result == 0 && !decreases.empty()) {
    // The dropped references are durable before their refcounts go down.
    result = co_await io_->Flush();
    if (result == 0) {
      auto batch = std::make_unique<GraceBatch>(&image_->grace);
      batch->decreases = std::move(decreases);
      batch->sequence = next_batch_++;
      grace_batches_.push_back(std::move(batch));
    }
  }
  for (uint32_t i : slabs) {
    TableCache::Slab& slab = tables.slab(i);
    --slab.writing;
    if (result < 0) slab.dirty = true;
  }
  if (result < 0) {
    for (const auto& entry : l1_entries) {
      if (l1_disk_[entry.first] != entry.second) l1_dirty_.insert(entry.first);
    }
    decreases_.insert(decreases_.end(), decreases.begin(), decreases.end());
    data_since_sync_ = data_since_sync_ || data;
  }
  slab_released_.WakeAll();
  co_return result;
}

Task<int> Engine::WritebackForSpace() {
  co_await writeback_mutex_.Lock();
  AsyncLockGuard guard(writeback_mutex_);
  co_return co_await RunCycle();
}

Task<int> Engine::Flush() {
  co_await writeback_mutex_.Lock();
  AsyncLockGuard guard(writeback_mutex_);
  uint64_t changes = change_count_;
  int result = co_await RunCycle();
  if (result == 0) result = co_await io_->Flush();
  // Nothing changed since the cycle took its snapshot: all metadata is durable.
  if (result == 0 && changes == change_count_) {
    image_->metadata_clean.store(true, std::memory_order_release);
  }
  co_return result;
}

Task<int> Engine::WaitDecreasesApplied() {
  // The batches queued so far; any a later writeback queues are not waited for.
  const uint64_t end = next_batch_;
  while (BatchesPending(end)) co_await decreases_applied_.Wait();
  co_return 0;
}

bool Engine::BatchesPending(uint64_t end) const {
  return (!grace_batches_.empty() && grace_batches_.front()->sequence < end) ||
         (!applying_.empty() && *applying_.begin() < end);
}

void Engine::MaybeTrim() {
  if (!trim_after_.has_value() || BatchesPending(*trim_after_)) return;
  trim_after_.reset();
  Spawn(TrimAfterShrink());
}

Task<void> Engine::TrimAfterShrink() {
  // Counted as active, so that a close waits for it.
  ++active_;
  // The dropped refcounts are durable before the clusters they covered leave the file. (Not
  // `if (co_await Flush() == 0)`, which GCC 12 miscompiles here.)
  int result = co_await Flush();
  if (result == 0) co_await TrimFile(0);
  if (--active_ == 0) idle_.WakeAll();
}

Task<uint64_t> Engine::ImageEnd() {
  for (uint64_t index = reftable_.size(); index-- > 0;) {
    if (reftable_[index] == 0) continue;
    RefcountCache::Block* block;
    if (co_await AcquireBlock(index, &block) < 0 || block == nullptr) co_return UINT64_MAX;
    for (uint64_t i = g_.refblock_entries(); i-- > 0;) {
      if (GetRefcount(block->data.get(), g_.refcount_order, i) != 0) {
        co_return ((index << g_.refblock_bits) + i + 1) << g_.cluster_bits;
      }
    }
  }
  co_return UINT64_MAX;
}

Task<void> Engine::TrimFile(uint64_t at_least) {
  if (!image_->file->capabilities().resize) co_return;
  // No allocation may run meanwhile: it could take a cluster past the end found here.
  co_await alloc_mutex_.Lock();
  AsyncLockGuard guard(alloc_mutex_);
  // co_await as a plain statement: GCC 12 miscompiles some inside expressions (a coroutine
  // started with a garbage resume index).
  uint64_t end = co_await ImageEnd();
  end = std::max(end, at_least);
  if (end == UINT64_MAX || end >= image_->file->size()) co_return;
  absl::Status status = image_->file->Truncate(end);
  if (!status.ok()) {
    log::Warn("node '{}': cannot trim the image file: {}", image_->node_name,
              std::string(status.message()));
    co_return;
  }
  // Past the new end of the file, clusters read as zeroes again.
  zero_from_ = std::min(zero_from_, g_.clusters_for(end));
  file_size_at_open_ = std::min(file_size_at_open_, end);
}

Task<absl::Status> Engine::CloseTask() {
  while (active_ > 0) co_await idle_.Wait();
  // A trim a shrink still waits for happens below, not in a task of its own.
  const bool shrunk = trim_after_.has_value();
  trim_after_.reset();
  if (image_->read_only) co_return absl::OkStatus();
  if (image_->corrupt.load(std::memory_order_relaxed)) {
    co_return absl::DataLossError(
        fmt::format("node '{}': the image is corrupt; its metadata changes were not written",
                    image_->node_name));
  }
  if (const int error = image_->flush_failed.load(std::memory_order_acquire); error != 0) {
    co_return absl::DataLossError(fmt::format(
        "node '{}': a flush of the image failed ({}); the metadata changes since the last good "
        "flush were not written back (qemu-img check finds what leaked)",
        image_->node_name, std::strerror(error)));
  }
  int result = co_await Flush();
  // The clusters freed meanwhile: their refcounts drop now, so nothing leaks.
  if (result == 0) result = co_await WaitDecreasesApplied();
  if (result == 0) result = co_await Flush();
  if (result == 0 && dirty_bit_on_disk_) {
    dirty_bit_on_disk_ = false;
    uint8_t bytes[8];
    StoreBe64(bytes, IncompatibleOnDisk());
    result = co_await io_->Write(field::kIncompatibleFeatures, bytes, sizeof(bytes));
    if (result == 0) result = co_await io_->Flush();
  }
  // Give back what the file grew ahead of allocation, or all a shrink freed.
  if (result == 0 && (file_grown_ || shrunk)) co_await TrimFile(shrunk ? 0 : file_size_at_open_);
  if (result < 0) {
    co_return absl::ErrnoToStatus(-result, fmt::format("node '{}': cannot write the image's "
                                                       "metadata back",
                                                       image_->node_name));
  }
  co_return absl::OkStatus();
}

}  // namespace bexd::block::qcow2
