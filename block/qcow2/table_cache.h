// SPDX-License-Identifier: GPL-2.0-or-later
// The active L1 table and the cache of L2 tables, shared by the metadata thread (the only writer)
// and the queue threads, which look mappings up without a lock.
//
// - The L1 table lives in a reservation large enough for the largest L1 table qcow2 allows
//   (32 MiB, mapped without reserving memory; only the pages in use are touched), so growing it
//   never moves it and readers never see a stale copy. Entries are atomic 64-bit words.
// - The L2 cache is a fixed array of slabs, each one L2 table. slab_of[l1 index] names the slab
//   that holds that index's table. A slab is never freed while the node lives; when the metadata
//   thread reuses it for another table it bumps the slab's sequence number to odd, refills it and
//   bumps it back to even (a seqlock). A reader takes the sequence, checks the slab holds the table
//   its L1 entry points to, reads the entry and checks the sequence again, so it gets an entry of
//   the right table or a miss, never a torn or foreign one. Entries themselves are atomic words:
//   the metadata thread changes a standard entry with one store, which readers see whole.
// - Readers mark a slab referenced (a CLOCK bit) only when it is not marked yet, so lookups do not
//   write shared cache lines on every request.
#pragma once

#include <absl/status/statusor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "block/qcow2/format.h"

namespace bexd::block::qcow2 {

class TableCache {
 public:
  struct alignas(64) Slab {
    std::atomic<uint64_t> sequence{0};
    std::atomic<uint64_t> table_offset{0};  // the L2 table it holds; 0: none
    std::atomic<bool> referenced{false};
    // Metadata thread only.
    uint64_t l1_index = 0;
    bool dirty = false;
    uint32_t writing = 0;  // writebacks in flight
    uint32_t pins = 0;     // metadata jobs using it
    bool used_since_clean = false;
  };

  static absl::StatusOr<std::unique_ptr<TableCache>> Create(const Geometry& geometry,
                                                            uint32_t slab_count);
  ~TableCache();
  TableCache(const TableCache&) = delete;
  TableCache& operator=(const TableCache&) = delete;

  // ---- Any thread.
  uint64_t l1_size() const { return l1_size_.load(std::memory_order_acquire); }
  uint64_t l1_entry(uint64_t index) const { return l1_[index].load(std::memory_order_acquire); }

  // Reads entry `l2_index` (and, with extended L2 entries, its bitmap) of the L2 table at
  // `table_offset` that L1 index `l1_index` points to. False if that table is not cached.
  bool Lookup(uint64_t l1_index, uint64_t table_offset, uint64_t l2_index, uint64_t* entry,
              uint64_t* bitmap) const {
    uint32_t slot = slab_of_[l1_index].load(std::memory_order_acquire);
    if (slot == 0) return false;
    Slab& slab = slabs_[slot - 1];
    const std::atomic<uint64_t>* words = Words(slot - 1);
    uint64_t word = l2_index << (geometry_.extended_l2 ? 1 : 0);
    for (int attempt = 0; attempt < 8; ++attempt) {
      uint64_t before = slab.sequence.load(std::memory_order_acquire);
      if (before & 1) continue;
      if (slab.table_offset.load(std::memory_order_relaxed) != table_offset) return false;
      *entry = words[word].load(std::memory_order_relaxed);
      *bitmap = geometry_.extended_l2 ? words[word + 1].load(std::memory_order_relaxed) : 0;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (slab.sequence.load(std::memory_order_relaxed) != before) continue;
      if (!slab.referenced.load(std::memory_order_relaxed)) {
        slab.referenced.store(true, std::memory_order_relaxed);
      }
      return true;
    }
    return false;
  }

  // ---- Metadata thread only.
  const Geometry& geometry() const { return geometry_; }
  uint32_t slab_count() const { return static_cast<uint32_t>(slabs_.size()); }
  Slab& slab(uint32_t index) { return slabs_[index]; }
  // The slab holding L1 index `l1_index`'s table, or -1.
  int64_t SlabOf(uint64_t l1_index) const {
    return static_cast<int64_t>(slab_of_[l1_index].load(std::memory_order_relaxed)) - 1;
  }
  void set_l1_size(uint64_t size) { l1_size_.store(size, std::memory_order_release); }
  void set_l1_entry(uint64_t index, uint64_t value) {
    l1_[index].store(value, std::memory_order_release);
  }
  // Fills slab `index` with the table at `table_offset` for `l1_index` from big-endian bytes
  // (nullptr: an empty table) and publishes it. The slab must not be bound.
  void Bind(uint32_t index, uint64_t l1_index, uint64_t table_offset, const uint8_t* table);
  // Withdraws the slab from readers and releases its memory.
  void Unbind(uint32_t index);
  // The slab now stands for a copy of its table at `table_offset` (copy-on-write of an L2 table).
  void Move(uint32_t index, uint64_t table_offset);
  uint64_t entry(uint32_t index, uint64_t l2_index) const {
    return Words(index)[l2_index << (geometry_.extended_l2 ? 1 : 0)].load(
        std::memory_order_relaxed);
  }
  uint64_t bitmap(uint32_t index, uint64_t l2_index) const {
    return geometry_.extended_l2 ? Words(index)[(l2_index << 1) + 1].load(std::memory_order_relaxed)
                                 : 0;
  }
  void set_entry(uint32_t index, uint64_t l2_index, uint64_t value) {
    Words(index)[l2_index << (geometry_.extended_l2 ? 1 : 0)].store(value,
                                                                    std::memory_order_release);
  }
  // The slab's table as it goes to disk (big-endian), cluster_size bytes.
  void Serialize(uint32_t index, uint8_t* out) const;

 private:
  TableCache(const Geometry& geometry, uint32_t slab_count);
  std::atomic<uint64_t>* Words(uint32_t index) const {
    return arena_ + (static_cast<uint64_t>(index) << (geometry_.cluster_bits - 3));
  }

  Geometry geometry_;
  std::atomic<uint64_t>* l1_ = nullptr;
  std::atomic<uint32_t>* slab_of_ = nullptr;
  std::atomic<uint64_t>* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  std::atomic<uint64_t> l1_size_{0};
  mutable std::vector<Slab> slabs_;
};

}  // namespace bexd::block::qcow2
