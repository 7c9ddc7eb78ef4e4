// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/table_cache.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>

namespace bexd::block::qcow2 {
namespace {

constexpr uint64_t kL1Capacity = kMaxL1Bytes / sizeof(uint64_t);

void* Reserve(size_t bytes) {
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return memory == MAP_FAILED ? nullptr : memory;
}

}  // namespace

TableCache::TableCache(const Geometry& geometry, uint32_t slab_count)
    : geometry_(geometry), slabs_(slab_count) {}

absl::StatusOr<std::unique_ptr<TableCache>> TableCache::Create(const Geometry& geometry,
                                                               uint32_t slab_count) {
  std::unique_ptr<TableCache> cache(new TableCache(geometry, slab_count));
  cache->arena_bytes_ = static_cast<size_t>(slab_count) << geometry.cluster_bits;
  void* l1 = Reserve(kL1Capacity * sizeof(uint64_t));
  void* slab_of = Reserve(kL1Capacity * sizeof(uint32_t));
  void* arena = Reserve(cache->arena_bytes_);
  // Anonymous mappings start zeroed, which is the value-initialised state of these atomics.
  cache->l1_ = static_cast<std::atomic<uint64_t>*>(l1);
  cache->slab_of_ = static_cast<std::atomic<uint32_t>*>(slab_of);
  cache->arena_ = static_cast<std::atomic<uint64_t>*>(arena);
  if (l1 == nullptr || slab_of == nullptr || arena == nullptr) {
    return absl::ResourceExhaustedError(
        fmt::format("cannot reserve memory for the L1 table and {} cached L2 tables", slab_count));
  }
  return cache;
}

TableCache::~TableCache() {
  if (l1_ != nullptr) munmap(l1_, kL1Capacity * sizeof(uint64_t));
  if (slab_of_ != nullptr) munmap(slab_of_, kL1Capacity * sizeof(uint32_t));
  if (arena_ != nullptr) munmap(arena_, arena_bytes_);
}

void TableCache::Bind(uint32_t index, uint64_t l1_index, uint64_t table_offset,
                      const uint8_t* table) {
  Slab& slab = slabs_[index];
  uint64_t sequence = slab.sequence.load(std::memory_order_relaxed);
  slab.sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic<uint64_t>* words = Words(index);
  uint64_t count = geometry_.cluster_size / sizeof(uint64_t);
  for (uint64_t i = 0; i < count; ++i) {
    words[i].store(table == nullptr ? 0 : LoadBe64(table + i * 8), std::memory_order_relaxed);
  }
  slab.table_offset.store(table_offset, std::memory_order_relaxed);
  slab.sequence.store(sequence + 2, std::memory_order_release);
  slab.l1_index = l1_index;
  slab.dirty = false;
  slab.referenced.store(true, std::memory_order_relaxed);
  slab.used_since_clean = true;
  slab_of_[l1_index].store(index + 1, std::memory_order_release);
}

void TableCache::Unbind(uint32_t index) {
  Slab& slab = slabs_[index];
  if (slab.table_offset.load(std::memory_order_relaxed) != 0) {
    slab_of_[slab.l1_index].store(0, std::memory_order_release);
  }
  uint64_t sequence = slab.sequence.load(std::memory_order_relaxed);
  slab.sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slab.table_offset.store(0, std::memory_order_relaxed);
  slab.sequence.store(sequence + 2, std::memory_order_release);
  slab.dirty = false;
  // Readers may still touch the memory; MADV_DONTNEED keeps it mapped (it reads as zeroes until
  // reused) and returns the pages. Smaller tables share pages with other slabs.
  if (geometry_.cluster_size >= 4096) {
    madvise(Words(index), geometry_.cluster_size, MADV_DONTNEED);
  }
}

void TableCache::Move(uint32_t index, uint64_t table_offset) {
  Slab& slab = slabs_[index];
  uint64_t sequence = slab.sequence.load(std::memory_order_relaxed);
  slab.sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slab.table_offset.store(table_offset, std::memory_order_relaxed);
  slab.sequence.store(sequence + 2, std::memory_order_release);
}

void TableCache::Serialize(uint32_t index, uint8_t* out) const {
  const std::atomic<uint64_t>* words = Words(index);
  uint64_t count = geometry_.cluster_size / sizeof(uint64_t);
  for (uint64_t i = 0; i < count; ++i) {
    StoreBe64(out + i * 8, words[i].load(std::memory_order_relaxed));
  }
}

}  // namespace bexd::block::qcow2
