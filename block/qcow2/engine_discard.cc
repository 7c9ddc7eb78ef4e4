// SPDX-License-Identifier: GPL-2.0-or-later
// Engine: discard and write-zeroes, which change L2 entries of whole clusters.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

#include "block/qcow2/engine.h"

namespace bexd::block::qcow2 {

Task<int> Engine::Discard(uint64_t offset, uint64_t length) {
  if (image_->discard == DiscardMode::kIgnore) co_return 0;
  if (image_->corrupt.load(std::memory_order_relaxed)) co_return -EIO;
  // Only whole clusters are discarded (a partial last cluster counts when the range reaches the
  // end of the image), as QEMU does.
  uint64_t size = image_->size.load(std::memory_order_acquire);
  uint64_t start = g_.cluster_floor(offset + g_.cluster_size - 1);
  uint64_t end = offset + length;
  end = end >= size ? g_.cluster_floor(end + g_.cluster_size - 1) : g_.cluster_floor(end);
  if (start >= end) co_return 0;
  co_return co_await ChangeClusters(start, end, Change::kDiscard);
}

Task<int> Engine::ZeroPartialCluster(uint64_t offset, uint64_t length) {
  // Nothing to do if the cluster reads as zeroes already.
  uint64_t l1_index = g_.l1_index(offset);
  int64_t slab = co_await AcquireTable(l1_index);
  if (slab == -ENOENT) {
    if (image_->backing == nullptr || offset >= image_->backing->size()) co_return 0;
  } else if (slab < 0) {
    co_return static_cast<int>(slab);
  } else {
    uint64_t entry = image_->tables->entry(static_cast<uint32_t>(slab), g_.l2_index(offset));
    ReleaseTable(slab);
    if (ReadsAsZero(g_.cluster_floor(offset), entry)) co_return 0;
  }
  co_return co_await WriteRange(offset, length, Source{}, false);
}

Task<int> Engine::WriteZeroes(uint64_t offset, uint64_t length, bool may_unmap) {
  if (image_->corrupt.load(std::memory_order_relaxed)) co_return -EIO;
  if (image_->version < 3) {
    // Version 2 has no zero flag: write the zeroes.
    co_return co_await WriteRange(offset, length, Source{}, false);
  }
  uint64_t size = std::max(image_->size.load(std::memory_order_acquire), offset + length);
  uint64_t end = offset + length;
  // Up to the end of the image, the last cluster counts as whole.
  uint64_t whole_end =
      end >= size ? g_.cluster_floor(end + g_.cluster_size - 1) : g_.cluster_floor(end);
  uint64_t whole_start = g_.cluster_floor(offset + g_.cluster_size - 1);
  if (whole_start >= whole_end) {
    // Within one cluster, or two partial ones.
    uint64_t middle = std::min(end, whole_start);
    int result = co_await ZeroPartialCluster(offset, middle - offset);
    if (result == 0 && middle < end) result = co_await ZeroPartialCluster(middle, end - middle);
    co_return result;
  }
  int result = 0;
  if (offset < whole_start) result = co_await ZeroPartialCluster(offset, whole_start - offset);
  if (result == 0) {
    result = co_await ChangeClusters(whole_start, whole_end,
                                     may_unmap ? Change::kZeroUnmap : Change::kZero);
  }
  if (result == 0 && whole_end < end) {
    result = co_await ZeroPartialCluster(whole_end, end - whole_end);
  }
  co_return result;
}

Task<int> Engine::ChangeClusters(uint64_t start, uint64_t end, Change change) {
  TableCache& tables = *image_->tables;
  const bool pass_discard = image_->pass_discard_request;
  const bool has_backing = image_->backing != nullptr;
  uint64_t position = start;
  while (position < end) {
    uint64_t l1_index = g_.l1_index(position);
    uint64_t span_end = std::min(end, (l1_index + 1) << (g_.cluster_bits + g_.l2_bits));
    uint64_t first = position >> g_.cluster_bits;
    uint64_t count = ((span_end - 1) >> g_.cluster_bits) - first + 1;
    if (InFlight(first, count)) {
      co_await WaitInFlight(first, count);
      continue;
    }
    uint64_t l1_entry = tables.l1_entry(l1_index);
    // Without a table nothing is allocated; the clusters need zero flags only to hide a backing
    // file (version 3).
    bool hide_backing = has_backing && image_->version >= 3 && change != Change::kDrop;
    if ((l1_entry & kOffsetMask) == 0 && !(l1_entry & kOflagZero) && !hide_backing) {
      position = span_end;
      continue;
    }
    int64_t slab = co_await AcquireWritableTable(l1_index);
    if (slab < 0) co_return static_cast<int>(slab);
    if (InFlight(first, count)) {
      ReleaseTable(slab);
      continue;
    }
    MetadataChanged();
    int result = 0;
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t l2 = g_.l2_index(position) + i;
      uint64_t old = tables.entry(static_cast<uint32_t>(slab), l2);
      Mapping mapping = ClassifyEntry(g_, old);
      if (mapping.kind == ClusterKind::kInvalid) {
        MarkCorrupt(
            fmt::format("invalid L2 entry for guest offset {:#x}", (first + i) << g_.cluster_bits));
        result = -EIO;
        break;
      }
      bool allocated = mapping.kind == ClusterKind::kData ||
                       mapping.kind == ClusterKind::kCompressed || mapping.host != 0;
      uint64_t replacement = kOflagZero;
      bool keep = false;
      switch (change) {
        case Change::kDiscard:
          // As QEMU: zero flags keep a backing file's data from showing through (version 3).
          replacement = image_->version >= 3 && (has_backing || allocated) ? kOflagZero : 0;
          break;
        case Change::kZero:
          // Keep the cluster allocated (as a preallocated zero cluster) when it is ours alone.
          keep = (mapping.kind == ClusterKind::kData || mapping.kind == ClusterKind::kZero) &&
                 mapping.host != 0 && mapping.copied;
          if (keep) replacement = mapping.host | kOflagZero | kOflagCopied;
          break;
        case Change::kZeroUnmap:
          break;
        case Change::kDrop:
          replacement = 0;
          break;
      }
      if (replacement == old) continue;
      tables.set_entry(static_cast<uint32_t>(slab), l2, replacement);
      tables.slab(static_cast<uint32_t>(slab)).dirty = true;
      // Space a shrink gave up goes back to the file child whatever discard= says, as QEMU does.
      if (!keep) {
        RecordFree(old, change == Change::kDrop || (pass_discard && change != Change::kZero));
      }
    }
    ReleaseTable(slab);
    if (result < 0) co_return result;
    position = span_end;
  }
  co_return 0;
}

}  // namespace bexd::block::qcow2
