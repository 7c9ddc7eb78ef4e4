// SPDX-License-Identifier: GPL-2.0-or-later
// Engine: the L1 table and the L2 table cache (loading, claiming slabs, new and copied tables).
#include <fmt/format.h>

#include <cerrno>

#include "block/qcow2/engine.h"
#include "block/qcow2/queue.h"

namespace bexd::block::qcow2 {
namespace {

// What a cached L2 table holds in place of an entry that failed validation: COPIED on a
// compressed cluster, which the format never allows, so every lookup sees kInvalid.
constexpr uint64_t kInvalidEntry = kOflagCopied | kOflagCompressed;

}  // namespace

bool Engine::TableBusy(uint64_t l1_index) { return busy_tables_.count(l1_index) != 0; }

void Engine::ClearTableBusy(uint64_t l1_index) {
  auto it = busy_tables_.find(l1_index);
  if (it == busy_tables_.end()) return;
  it->second->WakeAll();
  busy_tables_.erase(it);
}

void Engine::SetL1(uint64_t l1_index, uint64_t value) {
  MetadataChanged();
  image_->tables->set_l1_entry(l1_index, value);
  l1_dirty_.insert(l1_index);
}

Task<int64_t> Engine::ClaimSlab() {
  TableCache& tables = *image_->tables;
  for (;;) {
    uint32_t count = tables.slab_count();
    bool dirty = false;
    for (uint32_t step = 0; step < 2 * count; ++step) {
      uint32_t index = clock_hand_;
      clock_hand_ = (clock_hand_ + 1) % count;
      TableCache::Slab& slab = tables.slab(index);
      if (slab.pins > 0 || slab.writing > 0) continue;
      if (slab.dirty) {
        dirty = true;
        continue;
      }
      if (slab.table_offset.load(std::memory_order_relaxed) == 0) {
        slab.pins = 1;
        co_return index;
      }
      if (slab.referenced.exchange(false, std::memory_order_relaxed)) continue;
      tables.Unbind(index);
      slab.pins = 1;
      co_return index;
    }
    if (dirty) {
      // Every idle table is dirty: write them back to make room.
      int result = co_await WritebackForSpace();
      if (result < 0) co_return result;
      continue;
    }
    co_await slab_released_.Wait();
  }
}

void Engine::ReleaseTable(int64_t slab) {
  TableCache::Slab& entry = image_->tables->slab(static_cast<uint32_t>(slab));
  if (--entry.pins == 0) slab_released_.WakeAll();
}

const char* Engine::NonL2MetadataAt(uint64_t cluster) const {
  auto within = [&](uint64_t offset, uint64_t bytes) {
    return bytes > 0 && cluster >= (offset >> g_.cluster_bits) &&
           cluster < (offset >> g_.cluster_bits) + g_.clusters_for(bytes);
  };
  if (cluster == 0) return "the image header";
  if (within(header_.l1_table_offset, uint64_t{header_.l1_size} * 8)) return "the L1 table";
  if (within(header_.refcount_table_offset,
             uint64_t{header_.refcount_table_clusters} << g_.cluster_bits)) {
    return "the refcount table";
  }
  for (uint64_t block : reftable_) {
    if (block != 0 && (block >> g_.cluster_bits) == cluster) return "a refcount block";
  }
  if (header_.nb_snapshots > 0 && within(header_.snapshots_offset, snapshot_table_bytes_)) {
    return "the snapshot table";
  }
  for (const SnapshotInfo& snapshot : snapshots_) {
    if (within(snapshot.l1_table_offset, uint64_t{snapshot.l1_size} * 8)) {
      return "a snapshot's L1 table";
    }
  }
  return nullptr;
}

// As QEMU's overlap checks, but once per table load rather than per write: a table in the place
// of other metadata, or a data cluster in the place of any metadata, would have guest writes
// overwrite that metadata. On a writable node such entries are made invalid (EIO) and the image
// is marked corrupt; a read-only node overwrites nothing and reads them as QEMU does.
Task<int> Engine::LoadTable(uint64_t l1_index, uint64_t table_offset, uint32_t slab) {
  uint64_t file_size = image_->file->size();
  if (table_offset > file_size || g_.cluster_size > file_size - table_offset) {
    MarkCorrupt(
        fmt::format("the L2 table at {:#x} (L1 index {}) lies past the end of the image "
                    "file",
                    table_offset, l1_index));
    co_return -EIO;
  }
  const bool writable = !image_->read_only;
  if (const char* other = writable ? NonL2MetadataAt(table_offset >> g_.cluster_bits) : nullptr) {
    MarkCorrupt(fmt::format("the L2 table at {:#x} (L1 index {}) lies in {}", table_offset,
                            l1_index, other));
    co_return -EIO;
  }
  auto table = std::make_unique<uint8_t[]>(g_.cluster_size);
  int result = co_await io_->Read(table_offset, table.get(), g_.cluster_size);
  if (result < 0) co_return result;
  uint64_t invalid = 0;
  uint64_t on_metadata = 0;
  for (uint64_t i = 0; i < g_.l2_entries(); ++i) {
    uint8_t* at = table.get() + i * g_.l2_entry_bytes;
    uint64_t entry = LoadBe64(at);
    bool valid;
    if (g_.extended_l2) {
      // Extended L2 images are read-only here: no write can go through their entries.
      valid = ExtendedEntryValid(g_, entry, LoadBe64(at + 8));
    } else {
      Mapping mapping = ClassifyEntry(g_, entry);
      valid = mapping.kind != ClusterKind::kInvalid;
      if (valid && writable && mapping.host != 0 &&
          IsMetadataCluster(mapping.host >> g_.cluster_bits)) {
        valid = false;
        ++on_metadata;
      }
    }
    if (valid) continue;
    StoreBe64(at, kInvalidEntry);
    if (g_.extended_l2) StoreBe64(at + 8, 0);
    ++invalid;
  }
  image_->tables->Bind(slab, l1_index, table_offset, table.get());
  if (on_metadata > 0) {
    MarkCorrupt(
        fmt::format("the L2 table at {:#x} (L1 index {}) maps {} data clusters onto "
                    "metadata",
                    table_offset, l1_index, on_metadata));
  } else if (invalid > 0) {
    MarkCorrupt(fmt::format("the L2 table at {:#x} (L1 index {}) has {} invalid entries",
                            table_offset, l1_index, invalid));
  }
  co_return 0;
}

Task<int64_t> Engine::AcquireTable(uint64_t l1_index) {
  TableCache& tables = *image_->tables;
  for (;;) {
    if (l1_index >= tables.l1_size()) co_return -EIO;
    uint64_t l1_entry = tables.l1_entry(l1_index);
    if (l1_entry & kOflagZero) co_return -EIO;  // failed validation at open
    uint64_t table = l1_entry & kOffsetMask;
    if (table == 0) co_return -ENOENT;
    int64_t slab = tables.SlabOf(l1_index);
    if (slab >= 0) {
      TableCache::Slab& cached = tables.slab(static_cast<uint32_t>(slab));
      if (cached.table_offset.load(std::memory_order_relaxed) == table) {
        ++cached.pins;
        cached.used_since_clean = true;
        co_return slab;
      }
    }
    auto busy = busy_tables_.find(l1_index);
    if (busy != busy_tables_.end()) {
      co_await busy->second->Wait();
      continue;
    }
    busy_tables_[l1_index] = std::make_unique<WaitList>(&scheduler_);
    int64_t claimed = co_await ClaimSlab();
    int result = claimed < 0 ? static_cast<int>(claimed)
                             : co_await LoadTable(l1_index, table, static_cast<uint32_t>(claimed));
    ClearTableBusy(l1_index);
    if (result < 0) {
      if (claimed >= 0) ReleaseTable(claimed);
      co_return result;
    }
    co_return claimed;
  }
}

Task<int64_t> Engine::AcquireWritableTable(uint64_t l1_index) {
  TableCache& tables = *image_->tables;
  for (;;) {
    if (l1_index >= tables.l1_size()) co_return -EIO;
    uint64_t l1_entry = tables.l1_entry(l1_index);
    if (l1_entry & kOflagZero) co_return -EIO;
    uint64_t table = l1_entry & kOffsetMask;
    if (table == 0) {
      if (TableBusy(l1_index)) {
        co_await busy_tables_[l1_index]->Wait();
        continue;
      }
      busy_tables_[l1_index] = std::make_unique<WaitList>(&scheduler_);
      uint64_t count = 0;
      bool fresh = false;
      int64_t host = co_await Allocate(1, &count, &fresh);
      int64_t slab = host < 0 ? host : co_await ClaimSlab();
      if (slab < 0) {
        if (host >= 0) co_await FreeNow(static_cast<uint64_t>(host) >> g_.cluster_bits, 1);
        ClearTableBusy(l1_index);
        co_return slab;
      }
      // A new table is all zeroes; it reaches the disk before the L1 entry that points to it.
      tables.Bind(static_cast<uint32_t>(slab), l1_index, static_cast<uint64_t>(host), nullptr);
      tables.slab(static_cast<uint32_t>(slab)).dirty = true;
      AddMetadataClusters(static_cast<uint64_t>(host), g_.cluster_size);
      SetL1(l1_index, static_cast<uint64_t>(host) | kOflagCopied);
      ClearTableBusy(l1_index);
      co_return slab;
    }
    int64_t slab = co_await AcquireTable(l1_index);
    if (slab < 0) co_return slab;
    l1_entry = tables.l1_entry(l1_index);
    if (l1_entry & kOflagCopied) co_return slab;
    // The table is shared with a snapshot: write to a copy of it.
    uint64_t count = 0;
    bool fresh = false;
    int64_t host = co_await Allocate(1, &count, &fresh);
    if (host < 0) {
      ReleaseTable(slab);
      co_return host;
    }
    if (tables.l1_entry(l1_index) != l1_entry) {
      // Someone else copied it meanwhile.
      co_await FreeNow(static_cast<uint64_t>(host) >> g_.cluster_bits, 1);
      ReleaseTable(slab);
      continue;
    }
    tables.Move(static_cast<uint32_t>(slab), static_cast<uint64_t>(host));
    tables.slab(static_cast<uint32_t>(slab)).dirty = true;
    AddMetadataClusters(static_cast<uint64_t>(host), g_.cluster_size);
    SetL1(l1_index, static_cast<uint64_t>(host) | kOflagCopied);
    decreases_.push_back(Decrease{(l1_entry & kOffsetMask) >> g_.cluster_bits, 1, false});
    co_return slab;
  }
}

Task<void> Engine::ResumeAfterLoad(IoRequest* request) {
  RequestState* state = StateOf(request);
  uint64_t offset = request->offset + state->done;
  uint64_t l1_index = g_.l1_index(offset);
  int64_t slab = co_await AcquireTable(l1_index);
  if (slab < 0 && slab != -ENOENT) {
    ReplyDone(request, slab);
    co_return;
  }
  if (slab >= 0) {
    // A copy of the entries the request still needs from this table, so it can go on even if the
    // cache drops the table before the queue thread gets to it.
    TableCache& tables = *image_->tables;
    uint64_t first = g_.l2_index(offset);
    uint64_t end = request->offset + request->length;
    uint64_t table_end = (l1_index + 1) << (g_.cluster_bits + g_.l2_bits);
    if (end > table_end || end < offset) end = table_end;
    uint64_t count = g_.l2_index(end - 1) - first + 1;
    auto* copy = new TableCopy();
    copy->l1_index = l1_index;
    copy->table_offset =
        tables.slab(static_cast<uint32_t>(slab)).table_offset.load(std::memory_order_relaxed);
    copy->first = first;
    copy->count = count;
    copy->words = std::make_unique<uint64_t[]>(count * (g_.extended_l2 ? 2 : 1));
    for (uint64_t i = 0; i < count; ++i) {
      if (g_.extended_l2) {
        copy->words[i * 2] = tables.entry(static_cast<uint32_t>(slab), first + i);
        copy->words[i * 2 + 1] = tables.bitmap(static_cast<uint32_t>(slab), first + i);
      } else {
        copy->words[i] = tables.entry(static_cast<uint32_t>(slab), first + i);
      }
    }
    ReleaseTable(slab);
    delete state->copy;
    state->copy = copy;
  }
  state->reply = Reply::kResume;
  state->queue->Reply(request);
}

Task<int> Engine::GrowL1(uint64_t min_entries) {
  uint64_t entries = header_.l1_size;
  while (entries < min_entries) entries = entries * 3 / 2 + 1;
  uint64_t max_entries = kMaxL1Bytes / sizeof(uint64_t);
  if (entries > max_entries) entries = max_entries;
  if (entries < min_entries) co_return -EFBIG;
  uint64_t clusters = g_.clusters_for(entries * sizeof(uint64_t));
  // Past the clusters in use where the file can grow; else (a block device, a full filesystem)
  // in free clusters inside it, as QEMU allocates.
  int64_t host = -ENOSPC;
  if (image_->file->capabilities().resize) host = co_await AllocateAtEnd(clusters);
  if (host == -ENOSPC) host = co_await AllocateFirstFit(clusters);
  if (host < 0) co_return static_cast<int>(host);
  AddMetadataClusters(static_cast<uint64_t>(host), clusters << g_.cluster_bits);
  int result = 0;
  bool switched = false;
  {
    co_await writeback_mutex_.Lock();
    AsyncLockGuard guard(writeback_mutex_);
    // The new table holds what the old one holds on disk; entries waiting for their tables to be
    // written go to the new place in a later writeback.
    std::vector<uint8_t> table(clusters << g_.cluster_bits, 0);
    for (uint64_t i = 0; i < l1_disk_.size(); ++i) StoreBe64(table.data() + i * 8, l1_disk_[i]);
    result = co_await WriteDirtyRefblocksLocked();
    if (result == 0) {
      result = co_await io_->Write(static_cast<uint64_t>(host), table.data(), table.size());
    }
    if (result == 0) result = co_await io_->Flush();
    uint8_t fields[12];
    StoreBe32(fields, static_cast<uint32_t>(entries));
    StoreBe64(fields + 4, static_cast<uint64_t>(host));
    if (result == 0) {
      result = co_await io_->Write(field::kL1Size, fields, sizeof(fields));
      // Once the header points to the new table, it is the table (even if the flush fails).
      switched = result == 0;
    }
    if (result == 0) result = co_await io_->Flush();
    if (switched) {
      decreases_.push_back(Decrease{header_.l1_table_offset >> g_.cluster_bits,
                                    g_.clusters_for(uint64_t{header_.l1_size} * 8), false});
      header_.l1_table_offset = static_cast<uint64_t>(host);
      header_.l1_size = static_cast<uint32_t>(entries);
      l1_disk_.resize(entries, 0);
      image_->tables->set_l1_size(entries);
    }
  }
  // Freeing takes the writeback mutex when the refcount cache is full: only after releasing it.
  if (!switched) co_await FreeNow(static_cast<uint64_t>(host) >> g_.cluster_bits, clusters);
  co_return result;
}

void Engine::DropUnusedTables() {
  TableCache& tables = *image_->tables;
  for (uint32_t i = 0; i < tables.slab_count(); ++i) {
    TableCache::Slab& slab = tables.slab(i);
    if (slab.table_offset.load(std::memory_order_relaxed) == 0 || slab.pins > 0 ||
        slab.writing > 0 || slab.dirty) {
      continue;
    }
    bool used = slab.used_since_clean || slab.referenced.exchange(false, std::memory_order_relaxed);
    slab.used_since_clean = false;
    if (!used) tables.Unbind(i);
  }
}

}  // namespace bexd::block::qcow2
