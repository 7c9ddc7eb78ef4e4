// SPDX-License-Identifier: GPL-2.0-or-later
// Engine: refcounts, cluster allocation, growing the refcount structures, freeing clusters.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "block/qcow2/engine.h"
#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::block::qcow2 {
namespace {

// The file grows ahead of allocation in steps, so that allocating writes do not resize it one
// cluster at a time; a clean close cuts it back to the last used cluster.
constexpr uint64_t kMaxGrowStep = uint64_t{32} << 20;

}  // namespace

void Engine::AddMetadataClusters(uint64_t offset, uint64_t bytes) {
  uint64_t first = offset >> g_.cluster_bits;
  for (uint64_t i = 0; i < g_.clusters_for(bytes); ++i) {
    metadata_clusters_.insert(first + i);
    metadata_filter_.set((first + i) & (kMetadataFilterBits - 1));
  }
}

void Engine::InitMetadataClusters() {
  AddMetadataClusters(0, g_.cluster_size);
  AddMetadataClusters(header_.l1_table_offset, uint64_t{header_.l1_size} * 8);
  AddMetadataClusters(header_.refcount_table_offset,
                      uint64_t{header_.refcount_table_clusters} << g_.cluster_bits);
  for (uint64_t block : reftable_) {
    if (block != 0) AddMetadataClusters(block, g_.cluster_size);
  }
  for (uint64_t entry : l1_disk_) {
    uint64_t table = entry & kOffsetMask;
    if (table != 0 && g_.offset_in_cluster(table) == 0) AddMetadataClusters(table, g_.cluster_size);
  }
  for (const SnapshotInfo& snapshot : snapshots_) {
    AddMetadataClusters(snapshot.l1_table_offset, uint64_t{snapshot.l1_size} * 8);
  }
  if (header_.nb_snapshots > 0) {
    AddMetadataClusters(header_.snapshots_offset, snapshot_table_bytes_);
  }
}

Task<int> Engine::AcquireBlock(uint64_t table_index, RefcountCache::Block** block) {
  *block = nullptr;
  for (;;) {
    if (table_index >= reftable_.size() || reftable_[table_index] == 0) co_return 0;
    if (RefcountCache::Block* cached = refblocks_.Find(table_index)) {
      *block = cached;
      co_return 0;
    }
    auto loading = loading_blocks_.find(table_index);
    if (loading != loading_blocks_.end()) {
      co_await loading->second->Wait();
      continue;
    }
    if (!refblocks_.MakeRoom()) {
      int result = co_await WriteDirtyRefblocks();
      if (result < 0) co_return result;
      if (!refblocks_.MakeRoom()) co_await slab_released_.Wait();
      continue;
    }
    loading_blocks_[table_index] = std::make_unique<WaitList>(&scheduler_);
    uint64_t offset = reftable_[table_index];
    auto data = std::make_unique<uint8_t[]>(g_.cluster_size);
    int result = co_await io_->Read(offset, data.get(), g_.cluster_size);
    auto node = loading_blocks_.extract(table_index);
    node.mapped()->WakeAll();
    if (result < 0) co_return result;
    *block = refblocks_.Insert(table_index, offset, data.get());
    co_return 0;
  }
}

int Engine::EnsureFileSize(uint64_t end) {
  uint64_t size = image_->file->size();
  if (size >= end) return 0;
  uint64_t step = std::clamp<uint64_t>(size / 8, g_.cluster_size, kMaxGrowStep);
  uint64_t target = std::max(end, size + step);
  target = (target + g_.cluster_size - 1) & ~(g_.cluster_size - 1);
  absl::Status status = image_->file->Truncate(target);
  if (!status.ok()) {
    // A block device cannot grow; if the exact size fits, take it, else the image is full.
    status = image_->file->Truncate(end);
    if (!status.ok()) {
      static log::RateLimit limit;
      log::Limited(limit, log::Level::kError, "node '{}': cannot grow the image file: {}",
                   image_->node_name, std::string(status.message()));
      return -ENOSPC;
    }
  }
  file_grown_ = true;
  return 0;
}

Task<int64_t> Engine::Allocate(uint64_t wanted, uint64_t* count, bool* fresh) {
  co_await alloc_mutex_.Lock();
  AsyncLockGuard guard(alloc_mutex_);
  const uint64_t per_block = g_.refblock_entries();
  uint64_t cluster = free_hint_;
  for (;;) {
    if (image_->corrupt.load(std::memory_order_relaxed)) co_return -EIO;
    uint64_t table_index = cluster >> g_.refblock_bits;
    if (table_index >= reftable_.size()) {
      int result = co_await GrowRefcountTable(cluster);
      if (result < 0) co_return result;
      continue;
    }
    if (reftable_[table_index] == 0) {
      int result = co_await CreateRefblock(table_index, cluster);
      if (result < 0) co_return result;
      continue;
    }
    RefcountCache::Block* block;
    int result = co_await AcquireBlock(table_index, &block);
    if (result < 0) co_return result;
    const uint32_t order = g_.refcount_order;
    uint64_t index = cluster & (per_block - 1);
    while (index < per_block && GetRefcount(block->data.get(), order, index) != 0) ++index;
    if (index == per_block) {
      cluster = (table_index + 1) << g_.refblock_bits;
      continue;
    }
    uint64_t first = (table_index << g_.refblock_bits) + index;
    if (IsMetadataCluster(first)) {
      MarkCorrupt(fmt::format("cluster {:#x} holds metadata but its refcount is 0",
                              first << g_.cluster_bits));
      co_return -EIO;
    }
    uint64_t run = 1;
    while (run < wanted && index + run < per_block &&
           GetRefcount(block->data.get(), order, index + run) == 0 &&
           !IsMetadataCluster(first + run)) {
      ++run;
    }
    result = EnsureFileSize((first + run) << g_.cluster_bits);
    if (result < 0) co_return result;
    MetadataChanged();
    for (uint64_t i = 0; i < run; ++i) SetRefcount(block->data.get(), order, index + i, 1);
    block->dirty = true;
    free_hint_ = first + run;
    *fresh = first >= zero_from_;
    zero_from_ = std::max(zero_from_, first + run);
    *count = run;
    co_return static_cast<int64_t>(first << g_.cluster_bits);
  }
}

Task<int64_t> Engine::AllocateAtEnd(uint64_t count) {
  co_await alloc_mutex_.Lock();
  AsyncLockGuard guard(alloc_mutex_);
  const uint64_t per_block = g_.refblock_entries();
  // Past every cluster anything uses, so the run is contiguous. Not re-read from the file's size
  // after making metadata here: the file grows ahead by up to 32 MiB, more than a refcount block
  // covers with small clusters, so each restart would land in another range without a block.
  uint64_t floor = std::max(zero_from_, g_.clusters_for(image_->file->size()));
  for (;;) {
    uint64_t first = floor;
    uint64_t last = first + count - 1;
    if ((last >> g_.refblock_bits) >= reftable_.size()) {
      int result = co_await GrowRefcountTable(last);
      if (result < 0) co_return result;
      // The new blocks and table end where zero_from_ now starts.
      floor = std::max(floor, zero_from_);
      continue;
    }
    // A range the run reaches without a refcount block gets one at `floor`, ahead of the run,
    // which then starts a cluster later. In the range it covers, the block would split the run,
    // and a run of a refcount block's coverage or more always reaches one more such range. Ranges
    // are filled from the lowest, so the range `floor` is in has a block unless it is this one.
    uint64_t missing = first >> g_.refblock_bits;
    while (missing <= (last >> g_.refblock_bits) && reftable_[missing] != 0) ++missing;
    if (missing <= (last >> g_.refblock_bits)) {
      if ((floor >> g_.refblock_bits) != missing) {
        RefcountCache::Block* home;
        int result = co_await AcquireBlock(floor >> g_.refblock_bits, &home);
        if (result < 0) co_return result;
        if (home == nullptr) co_return -EIO;
        MetadataChanged();
        SetRefcount(home->data.get(), g_.refcount_order, floor & (per_block - 1), 1);
        home->dirty = true;
      }
      // If this fails, `floor` stays counted in `home`: the refcount table entry may have reached
      // the disk, so a leak is the safe outcome, not a block referenced with refcount 0.
      int result = co_await CreateRefblock(missing, floor);
      if (result < 0) co_return result;
      floor = std::max(floor + 1, zero_from_);
      continue;
    }
    int result = EnsureFileSize((last + 1) << g_.cluster_bits);
    if (result < 0) co_return result;
    for (uint64_t cluster = first; cluster <= last; ++cluster) {
      RefcountCache::Block* block;
      result = co_await AcquireBlock(cluster >> g_.refblock_bits, &block);
      if (result < 0) co_return result;
      if (block == nullptr) co_return -EIO;
      MetadataChanged();
      SetRefcount(block->data.get(), g_.refcount_order, cluster & (per_block - 1), 1);
      block->dirty = true;
    }
    zero_from_ = last + 1;
    co_return static_cast<int64_t>(first << g_.cluster_bits);
  }
}

// The first free run of `count` clusters inside one refcount block's range, for when the file
// cannot grow (a block device, a full filesystem). Allocate hands out the first free run from
// its hint on, however short; runs too short are held while the search goes on, so it moves
// past them, and freed at the end.
Task<int64_t> Engine::AllocateFirstFit(uint64_t count) {
  std::vector<std::pair<uint64_t, uint64_t>> too_short;
  int64_t found = -ENOSPC;
  if (count <= g_.refblock_entries()) {
    for (;;) {
      uint64_t got = 0;
      bool fresh = false;
      found = co_await Allocate(count, &got, &fresh);
      if (found < 0 || got == count) break;
      too_short.emplace_back(static_cast<uint64_t>(found) >> g_.cluster_bits, got);
    }
  }
  for (const auto& [first, length] : too_short) {
    int result = co_await FreeNow(first, length);
    if (result < 0 && found >= 0) found = result;
  }
  co_return found;
}

Task<int> Engine::CreateRefblock(uint64_t table_index, uint64_t cluster) {
  // Every cluster of a range without a refcount block is free, so a block placed in its own range
  // describes itself: it goes to the cluster the allocator was about to hand out. One placed in
  // another range (AllocateAtEnd) has its refcount already set there by the caller.
  const bool describes_itself = (cluster >> g_.refblock_bits) == table_index;
  co_await writeback_mutex_.Lock();
  AsyncLockGuard guard(writeback_mutex_);
  if (reftable_[table_index] != 0) co_return 0;
  if (IsMetadataCluster(cluster)) {
    MarkCorrupt(fmt::format("cluster {:#x} holds metadata but has no refcount block",
                            cluster << g_.cluster_bits));
    co_return -EIO;
  }
  int result = EnsureFileSize((cluster + 1) << g_.cluster_bits);
  if (result < 0) co_return result;
  auto data = std::make_unique<uint8_t[]>(g_.cluster_size);
  std::memset(data.get(), 0, g_.cluster_size);
  if (describes_itself) {
    SetRefcount(data.get(), g_.refcount_order, cluster & (g_.refblock_entries() - 1), 1);
  }
  uint64_t offset = cluster << g_.cluster_bits;
  result = co_await io_->Write(offset, data.get(), g_.cluster_size);
  if (result == 0 && !describes_itself) result = co_await WriteDirtyRefblocksLocked();
  if (result == 0) result = co_await io_->Flush();
  uint8_t entry[8];
  StoreBe64(entry, offset);
  if (result == 0) {
    result = co_await io_->Write(header_.refcount_table_offset + table_index * 8, entry, 8);
  }
  // Once the refcount table points to the block, it is the block (even if the flush fails).
  if (result < 0) co_return result;
  result = co_await io_->Flush();
  reftable_[table_index] = offset;
  AddMetadataClusters(offset, g_.cluster_size);
  refblocks_.MakeRoom();
  refblocks_.Insert(table_index, offset, data.get());
  zero_from_ = std::max(zero_from_, cluster + 1);
  co_return result;
}

Task<int> Engine::GrowRefcountTable(uint64_t cluster) {
  co_await writeback_mutex_.Lock();
  AsyncLockGuard guard(writeback_mutex_);
  const uint64_t per_block = g_.refblock_entries();
  if ((cluster >> g_.refblock_bits) < reftable_.size()) co_return 0;
  // New refcount blocks and the new table go together at the start of the first range no block
  // covers yet; the blocks cover the ranges from there on, including the new area itself.
  uint64_t first_range =
      std::max<uint64_t>((cluster + per_block - 1) / per_block, reftable_.size());
  uint64_t area = first_range * per_block;
  uint64_t blocks = 1;
  uint64_t entries = 0;
  uint64_t table_clusters = 0;
  for (;;) {
    uint64_t end = area + blocks + table_clusters;
    uint64_t ranges = (end + per_block - 1) / per_block;
    uint64_t want_entries = std::max(ranges, reftable_.size() * 3 / 2);
    uint64_t want_clusters = g_.clusters_for(want_entries * 8);
    uint64_t want_blocks = ranges - first_range;
    if (want_clusters == table_clusters && want_blocks == blocks && want_entries <= entries) break;
    table_clusters = want_clusters;
    blocks = std::max<uint64_t>(want_blocks, 1);
    entries = table_clusters << (g_.cluster_bits - 3);
  }
  if ((table_clusters << g_.cluster_bits) > kMaxRefcountTableBytes) co_return -EFBIG;
  uint64_t area_end = area + blocks + table_clusters;
  int result = EnsureFileSize(area_end << g_.cluster_bits);
  if (result < 0) co_return result;
  std::vector<std::unique_ptr<uint8_t[]>> block_data;
  std::vector<uint64_t> table(entries, 0);
  std::copy(reftable_.begin(), reftable_.end(), table.begin());
  std::vector<ChildIo::Piece> pieces;
  for (uint64_t b = 0; b < blocks; ++b) {
    auto data = std::make_unique<uint8_t[]>(g_.cluster_size);
    std::memset(data.get(), 0, g_.cluster_size);
    uint64_t range_first = (first_range + b) * per_block;
    for (uint64_t c = std::max(range_first, area); c < std::min(range_first + per_block, area_end);
         ++c) {
      SetRefcount(data.get(), g_.refcount_order, c - range_first, 1);
    }
    table[first_range + b] = (area + b) << g_.cluster_bits;
    pieces.push_back({(area + b) << g_.cluster_bits, data.get(), g_.cluster_size});
    block_data.push_back(std::move(data));
  }
  std::vector<uint8_t> table_bytes(table_clusters << g_.cluster_bits, 0);
  for (uint64_t i = 0; i < entries; ++i) StoreBe64(table_bytes.data() + i * 8, table[i]);
  uint64_t table_offset = (area + blocks) << g_.cluster_bits;
  pieces.push_back({table_offset, table_bytes.data(), table_bytes.size()});
  result = co_await io_->WriteAll(pieces);
  if (result == 0) result = co_await io_->Flush();
  uint8_t fields[12];
  StoreBe64(fields, table_offset);
  StoreBe32(fields + 8, static_cast<uint32_t>(table_clusters));
  if (result == 0) result = co_await io_->Write(field::kRefcountTableOffset, fields, 12);
  // Once the header points to the new table, it is the table (even if the flush fails).
  if (result < 0) co_return result;
  result = co_await io_->Flush();
  decreases_.push_back(Decrease{header_.refcount_table_offset >> g_.cluster_bits,
                                header_.refcount_table_clusters, false});
  header_.refcount_table_offset = table_offset;
  header_.refcount_table_clusters = static_cast<uint32_t>(table_clusters);
  reftable_ = std::move(table);
  AddMetadataClusters(area << g_.cluster_bits, (blocks + table_clusters) << g_.cluster_bits);
  for (uint64_t b = 0; b < blocks; ++b) {
    refblocks_.MakeRoom();
    refblocks_.Insert(first_range + b, (area + b) << g_.cluster_bits, block_data[b].get());
  }
  zero_from_ = std::max(zero_from_, area_end);
  co_return result;
}

void Engine::RecordFree(uint64_t old_entry, bool discard) {
  Mapping old = ClassifyEntry(g_, old_entry);
  if (old.kind == ClusterKind::kCompressed) {
    ClusterSpan span = CompressedClusters(g_, old_entry);
    decreases_.push_back(Decrease{span.first, span.count, discard});
  } else if ((old.kind == ClusterKind::kData || old.kind == ClusterKind::kZero) && old.host != 0) {
    decreases_.push_back(Decrease{old.host >> g_.cluster_bits, 1, discard});
  }
}

Task<int> Engine::ChangeRefcount(uint64_t cluster, bool free_metadata, uint64_t* now) {
  RefcountCache::Block* block;
  int result = co_await AcquireBlock(cluster >> g_.refblock_bits, &block);
  if (result < 0) co_return result;
  uint64_t index = cluster & (g_.refblock_entries() - 1);
  uint64_t value = block == nullptr ? 0 : GetRefcount(block->data.get(), g_.refcount_order, index);
  if (value == 0) {
    MarkCorrupt(fmt::format("the refcount of cluster {:#x} would drop below zero",
                            cluster << g_.cluster_bits));
    co_return -EIO;
  }
  MetadataChanged();
  SetRefcount(block->data.get(), g_.refcount_order, index, value - 1);
  block->dirty = true;
  *now = value - 1;
  if (value == 1) {
    free_hint_ = std::min(free_hint_, cluster);
    if (free_metadata) metadata_clusters_.erase(cluster);
  }
  co_return 0;
}

Task<int> Engine::FreeNow(uint64_t first_cluster, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t now;
    int result = co_await ChangeRefcount(first_cluster + i, true, &now);
    if (result < 0) co_return result;
  }
  co_return 0;
}

Task<void> Engine::ApplyDecreases(uint64_t batch, std::vector<Decrease> decreases) {
  for (const Decrease& decrease : decreases) {
    for (uint64_t i = 0; i < decrease.count; ++i) {
      uint64_t cluster = decrease.first_cluster + i;
      if (decrease.discard) {
        // Pass the discard on only for a cluster this frees, and before it can be reused.
        RefcountCache::Block* block;
        int result = co_await AcquireBlock(cluster >> g_.refblock_bits, &block);
        if (result == 0 && block != nullptr &&
            GetRefcount(block->data.get(), g_.refcount_order,
                        cluster & (g_.refblock_entries() - 1)) == 1) {
          co_await io_->Discard(cluster << g_.cluster_bits, g_.cluster_size);
        }
      }
      uint64_t now;
      if (co_await ChangeRefcount(cluster, true, &now) < 0) break;
    }
  }
  applying_.erase(batch);
  decreases_applied_.WakeAll();
  MaybeTrim();
}

void Engine::CheckGracePeriods() {
  while (!grace_batches_.empty() && grace_batches_.front()->period.Done()) {
    uint64_t batch = grace_batches_.front()->sequence;
    std::vector<Decrease> decreases = std::move(grace_batches_.front()->decreases);
    grace_batches_.pop_front();
    applying_.insert(batch);
    Spawn(ApplyDecreases(batch, std::move(decreases)));
  }
}

}  // namespace bexd::block::qcow2
