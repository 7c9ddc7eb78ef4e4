// SPDX-License-Identifier: GPL-2.0-or-later
// Qcow2Queue: mapping guest ranges through the L1 table and the cached L2 tables, lock-free.
#include "block/qcow2/queue.h"

namespace bexd::block::qcow2 {

bool Qcow2Queue::LookupEntry(uint64_t l1_index, uint64_t table, uint64_t l2_index,
                             const TableCopy* copy, uint64_t* entry, uint64_t* bitmap) const {
  if (copy != nullptr && copy->l1_index == l1_index && copy->table_offset == table &&
      l2_index >= copy->first && l2_index - copy->first < copy->count) {
    uint64_t at = l2_index - copy->first;
    if (geometry_.extended_l2) {
      *entry = copy->words[at * 2];
      *bitmap = copy->words[at * 2 + 1];
    } else {
      *entry = copy->words[at];
      *bitmap = 0;
    }
    return true;
  }
  return image_->tables->Lookup(l1_index, table, l2_index, entry, bitmap);
}

Qcow2Queue::Extent Qcow2Queue::Map(uint64_t offset, uint64_t max_length, bool write,
                                   const TableCopy* copy) const {
  const Geometry& g = geometry_;
  const TableCache& tables = *image_->tables;
  const Kind unallocated =
      write ? Kind::kEngine : (image_->backing != nullptr ? Kind::kBacking : Kind::kZero);
  uint64_t l1_index = g.l1_index(offset);
  uint64_t end = offset + max_length;
  if (l1_index >= tables.l1_size()) return Extent{unallocated, max_length, 0};
  uint64_t table_end = (l1_index + 1) << (g.cluster_bits + g.l2_bits);
  if (table_end < end) end = table_end;
  uint64_t l1_entry = tables.l1_entry(l1_index);
  // The engine marks L1 entries that failed validation with a reserved bit.
  if (l1_entry & kOflagZero) return Extent{Kind::kInvalid, end - offset, 0};
  uint64_t table = l1_entry & kOffsetMask;
  if (table == 0) return Extent{unallocated, end - offset, 0};
  if (write && !(l1_entry & kOflagCopied)) return Extent{Kind::kEngine, end - offset, 0};

  Extent extent;
  bool first = true;
  uint64_t position = offset;
  while (position < end) {
    uint64_t entry;
    uint64_t bitmap;
    if (!LookupEntry(l1_index, table, g.l2_index(position), copy, &entry, &bitmap)) {
      if (first) return Extent{Kind::kMiss, end - offset, 0};
      break;
    }
    uint64_t cluster_end = g.cluster_floor(position) + g.cluster_size;
    if (cluster_end > end) cluster_end = end;
    while (position < cluster_end) {
      Mapping mapping;
      uint64_t unit_end = cluster_end;
      if (g.extended_l2) {
        uint64_t subcluster = position >> g.subcluster_bits;
        mapping = ClassifySubcluster(g, entry, bitmap,
                                     static_cast<uint32_t>(subcluster % kSubclustersPerCluster));
        uint64_t subcluster_end = (subcluster + 1) << g.subcluster_bits;
        if (subcluster_end < unit_end) unit_end = subcluster_end;
      } else {
        mapping = ClassifyEntry(g, entry);
      }
      Extent unit;
      switch (mapping.kind) {
        case ClusterKind::kData:
          unit.kind = write && !mapping.copied ? Kind::kEngine : Kind::kData;
          unit.host = mapping.host + g.offset_in_cluster(position);
          break;
        case ClusterKind::kZero:
          unit.kind = write ? Kind::kEngine : Kind::kZero;
          break;
        case ClusterKind::kUnallocated:
          unit.kind = unallocated;
          break;
        case ClusterKind::kCompressed:
          unit.kind = write ? Kind::kEngine : Kind::kCompressed;
          unit.host = entry;
          break;
        case ClusterKind::kInvalid:
          unit.kind = Kind::kInvalid;
          break;
      }
      if (first) {
        extent = unit;
        extent.length = unit_end - position;
        first = false;
      } else if (unit.kind == extent.kind && unit.kind != Kind::kCompressed &&
                 (unit.kind != Kind::kData || unit.host == extent.host + extent.length)) {
        extent.length += unit_end - position;
      } else {
        return extent;
      }
      position = unit_end;
    }
  }
  return extent;
}

}  // namespace bexd::block::qcow2
