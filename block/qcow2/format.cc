// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/format.h"

namespace bexd::block::qcow2 {

Geometry Geometry::Make(uint32_t cluster_bits, bool extended_l2, uint32_t refcount_order) {
  Geometry g;
  g.cluster_bits = cluster_bits;
  g.cluster_size = uint64_t{1} << cluster_bits;
  g.extended_l2 = extended_l2;
  g.l2_entry_bytes = extended_l2 ? 16 : 8;
  g.l2_bits = cluster_bits - (extended_l2 ? 4 : 3);
  g.subcluster_bits = extended_l2 ? cluster_bits - 5 : cluster_bits;
  g.refcount_order = refcount_order;
  g.refblock_bits = cluster_bits + 3 - refcount_order;
  g.csize_shift = 62 - (cluster_bits - 8);
  g.csize_mask = (uint64_t{1} << (cluster_bits - 8)) - 1;
  g.compressed_offset_mask = (uint64_t{1} << g.csize_shift) - 1;
  return g;
}

namespace {

Mapping Invalid() { return Mapping{ClusterKind::kInvalid, false, 0}; }

// Where a refcount narrower than a byte sits (bit 0 is the least significant, as the spec says).
struct SubByte {
  uint64_t byte;
  uint32_t shift;
  uint32_t mask;
};

SubByte SubByteAt(uint32_t order, uint64_t index) {
  uint32_t per_byte = 8u >> order;
  return SubByte{index / per_byte, static_cast<uint32_t>(index % per_byte) << order,
                 (1u << (1u << order)) - 1};
}

}  // namespace

Mapping ClassifyEntry(const Geometry& geometry, uint64_t entry) {
  if (entry & kOflagCompressed) {
    // QEMU never sets COPIED on a compressed cluster; bexd also uses that combination to mark
    // entries that failed validation.
    if ((entry & kOflagCopied) || !CompressedEntryValid(geometry, entry)) return Invalid();
    return Mapping{ClusterKind::kCompressed, false, 0};
  }
  uint64_t host = entry & kOffsetMask;
  if (geometry.offset_in_cluster(host) != 0) return Invalid();
  bool copied = (entry & kOflagCopied) != 0;
  if (entry & kOflagZero) return Mapping{ClusterKind::kZero, copied && host != 0, host};
  if (host == 0) return Mapping{ClusterKind::kUnallocated, false, 0};
  return Mapping{ClusterKind::kData, copied, host};
}

Mapping ClassifySubcluster(const Geometry& geometry, uint64_t entry, uint64_t bitmap,
                           uint32_t index) {
  if (entry & kOflagCompressed) {
    if (bitmap != 0 || (entry & kOflagCopied) || !CompressedEntryValid(geometry, entry)) {
      return Invalid();
    }
    return Mapping{ClusterKind::kCompressed, false, 0};
  }
  uint64_t host = entry & kOffsetMask;
  if (geometry.offset_in_cluster(host) != 0) return Invalid();
  bool copied = (entry & kOflagCopied) != 0 && host != 0;
  bool allocated = (bitmap >> index) & 1;
  bool zero = (bitmap >> (32 + index)) & 1;
  if (host == 0) {
    if (bitmap & kBitmapAllocMask) return Invalid();
    return Mapping{zero ? ClusterKind::kZero : ClusterKind::kUnallocated, false, 0};
  }
  if (allocated && zero) return Invalid();
  if (allocated) return Mapping{ClusterKind::kData, copied, host};
  // An allocated cluster whose subcluster is unallocated still reads from the backing file.
  return Mapping{zero ? ClusterKind::kZero : ClusterKind::kUnallocated, copied, host};
}

bool ExtendedEntryValid(const Geometry& geometry, uint64_t entry, uint64_t bitmap) {
  if (entry & kOflagCompressed) {
    return bitmap == 0 && !(entry & kOflagCopied) && CompressedEntryValid(geometry, entry);
  }
  uint64_t host = entry & kOffsetMask;
  if (geometry.offset_in_cluster(host) != 0) return false;
  if (host == 0) return (bitmap & kBitmapAllocMask) == 0;
  return (bitmap & (bitmap >> 32) & kBitmapAllocMask) == 0;
}

CompressedExtent DecodeCompressed(const Geometry& geometry, uint64_t entry) {
  CompressedExtent extent;
  extent.offset = entry & geometry.compressed_offset_mask;
  uint64_t sectors = ((entry >> geometry.csize_shift) & geometry.csize_mask) + 1;
  extent.size = sectors * kCompressedSectorSize - (extent.offset & (kCompressedSectorSize - 1));
  return extent;
}

bool CompressedEntryValid(const Geometry& geometry, uint64_t entry) {
  CompressedExtent extent = DecodeCompressed(geometry, entry);
  // Cluster 0 is the header; nothing compressed lives there.
  return extent.offset >= geometry.cluster_size && extent.offset <= kMaxHostOffset &&
         extent.size <= kMaxHostOffset - extent.offset;
}

ClusterSpan CompressedClusters(const Geometry& geometry, uint64_t entry) {
  CompressedExtent extent = DecodeCompressed(geometry, entry);
  uint64_t start = extent.offset & ~(kCompressedSectorSize - 1);
  uint64_t end = extent.offset + extent.size;  // a sector boundary
  ClusterSpan span;
  span.first = start >> geometry.cluster_bits;
  span.count = ((end - 1) >> geometry.cluster_bits) - span.first + 1;
  return span;
}

uint64_t GetRefcount(const uint8_t* block, uint32_t order, uint64_t index) {
  switch (order) {
    case 0:
    case 1:
    case 2: {
      SubByte at = SubByteAt(order, index);
      return (block[at.byte] >> at.shift) & at.mask;
    }
    case 3:
      return block[index];
    case 4:
      return LoadBe16(block + index * 2);
    case 5:
      return LoadBe32(block + index * 4);
    default:
      return LoadBe64(block + index * 8);
  }
}

void SetRefcount(uint8_t* block, uint32_t order, uint64_t index, uint64_t value) {
  switch (order) {
    case 0:
    case 1:
    case 2: {
      SubByte at = SubByteAt(order, index);
      uint8_t& byte = block[at.byte];
      byte =
          static_cast<uint8_t>((byte & ~(at.mask << at.shift)) | ((value & at.mask) << at.shift));
      break;
    }
    case 3:
      block[index] = static_cast<uint8_t>(value);
      break;
    case 4:
      StoreBe16(block + index * 2, static_cast<uint16_t>(value));
      break;
    case 5:
      StoreBe32(block + index * 4, static_cast<uint32_t>(value));
      break;
    default:
      StoreBe64(block + index * 8, value);
      break;
  }
}

}  // namespace bexd::block::qcow2
