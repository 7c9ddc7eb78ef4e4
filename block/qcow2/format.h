// SPDX-License-Identifier: GPL-2.0-or-later
// The qcow2 on-disk format (QEMU's docs/interop/qcow2.txt): constants, big-endian access, the
// geometry derived from the header, and the decoding of L1/L2/refcount entries. Everything here is
// pure: it reads buffers, never files.
#pragma once

#include <endian.h>

#include <cstdint>
#include <cstring>

namespace bexd::block::qcow2 {

inline uint16_t LoadBe16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return be16toh(v);
}
inline uint32_t LoadBe32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return be32toh(v);
}
inline uint64_t LoadBe64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return be64toh(v);
}
inline void StoreBe16(void* p, uint16_t v) {
  v = htobe16(v);
  std::memcpy(p, &v, sizeof(v));
}
inline void StoreBe32(void* p, uint32_t v) {
  v = htobe32(v);
  std::memcpy(p, &v, sizeof(v));
}
inline void StoreBe64(void* p, uint64_t v) {
  v = htobe64(v);
  std::memcpy(p, &v, sizeof(v));
}

constexpr uint32_t kMagic = 0x514649fb;  // "QFI\xfb"
constexpr uint32_t kMinClusterBits = 9;
constexpr uint32_t kMaxClusterBits = 21;
// Extended L2 entries split a cluster into 32 subclusters of at least 512 bytes.
constexpr uint32_t kSubclustersPerCluster = 32;

// QEMU's implementation limits, which every image it writes respects.
constexpr uint64_t kMaxL1Bytes = uint64_t{32} << 20;
constexpr uint64_t kMaxRefcountTableBytes = uint64_t{8} << 20;
constexpr uint32_t kMaxSnapshots = 65536;
constexpr uint64_t kMaxSnapshotTableBytes = uint64_t{1024} * kMaxSnapshots;
constexpr uint32_t kMaxSnapshotExtraData = 1024;
constexpr uint32_t kMaxBackingNameLength = 1023;
// Host offsets in L1/L2 entries have 56 bits.
constexpr uint64_t kMaxHostOffset = (uint64_t{1} << 56) - 1;
constexpr uint64_t kCompressedSectorSize = 512;
// QEMU keeps a qcow2 image's virtual size in whole sectors: it rounds any other size in a header
// down, so bexd never writes one.
constexpr uint32_t kSizeAlignment = 512;

// Header field offsets.
namespace field {
constexpr uint32_t kVersion = 4;
constexpr uint32_t kBackingFileOffset = 8;
constexpr uint32_t kBackingFileSize = 16;
constexpr uint32_t kClusterBits = 20;
constexpr uint32_t kSize = 24;
constexpr uint32_t kCryptMethod = 32;
constexpr uint32_t kL1Size = 36;
constexpr uint32_t kL1TableOffset = 40;
constexpr uint32_t kRefcountTableOffset = 48;
constexpr uint32_t kRefcountTableClusters = 56;
constexpr uint32_t kNbSnapshots = 60;
constexpr uint32_t kSnapshotsOffset = 64;
constexpr uint32_t kIncompatibleFeatures = 72;
constexpr uint32_t kCompatibleFeatures = 80;
constexpr uint32_t kAutoclearFeatures = 88;
constexpr uint32_t kRefcountOrder = 96;
constexpr uint32_t kHeaderLength = 100;
constexpr uint32_t kCompressionType = 104;
}  // namespace field
constexpr uint32_t kV2HeaderLength = 72;
constexpr uint32_t kV3MinHeaderLength = 104;

constexpr uint64_t kIncompatDirty = 1u << 0;
constexpr uint64_t kIncompatCorrupt = 1u << 1;
constexpr uint64_t kIncompatDataFile = 1u << 2;
constexpr uint64_t kIncompatCompressionType = 1u << 3;
constexpr uint64_t kIncompatExtendedL2 = 1u << 4;
constexpr uint64_t kIncompatKnown = kIncompatDirty | kIncompatCorrupt | kIncompatDataFile |
                                    kIncompatCompressionType | kIncompatExtendedL2;
constexpr uint64_t kCompatLazyRefcounts = 1u << 0;
constexpr uint64_t kAutoclearBitmaps = 1u << 0;
constexpr uint64_t kAutoclearDataFileRaw = 1u << 1;
// The autoclear bits whose data bexd keeps consistent: none (it maintains no bitmaps), so a
// writable open clears them all.
constexpr uint64_t kAutoclearMaintained = 0;

constexpr uint32_t kCryptNone = 0;
constexpr uint32_t kCryptAes = 1;
constexpr uint32_t kCryptLuks = 2;

constexpr uint8_t kCompressionZlib = 0;
constexpr uint8_t kCompressionZstd = 1;

constexpr uint32_t kExtEnd = 0x00000000;
constexpr uint32_t kExtBackingFormat = 0xe2792aca;
constexpr uint32_t kExtFeatureTable = 0x6803f857;
constexpr uint32_t kExtBitmaps = 0x23852875;
constexpr uint32_t kExtCryptoHeader = 0x0537be77;
constexpr uint32_t kExtDataFile = 0x44415441;

constexpr uint64_t kOflagCopied = uint64_t{1} << 63;
constexpr uint64_t kOflagCompressed = uint64_t{1} << 62;
constexpr uint64_t kOflagZero = uint64_t{1} << 0;
// Bits 9-55: the host offset of an L2 table (L1 entry) or of a standard cluster (L2 entry).
constexpr uint64_t kOffsetMask = 0x00fffffffffffe00ull;
constexpr uint64_t kRefcountTableOffsetMask = 0xfffffffffffffe00ull;
// Extended L2 bitmap: bit x allocates subcluster x, bit 32+x makes it read as zeroes.
constexpr uint64_t kBitmapAllocMask = 0xffffffffull;

// Sizes and shifts that follow from cluster_bits, extended L2 entries and refcount_order.
struct Geometry {
  uint32_t cluster_bits = 16;
  uint64_t cluster_size = 65536;
  bool extended_l2 = false;
  uint32_t l2_entry_bytes = 8;  // 16 with extended L2 entries
  uint32_t l2_bits = 13;        // log2 of the entries in one L2 table
  uint32_t subcluster_bits = 16;
  uint32_t refcount_order = 4;
  uint32_t refblock_bits = 15;  // log2 of the entries in one refcount block
  // Compressed cluster descriptors: offset in bits 0..csize_shift-1, extra sectors above.
  uint32_t csize_shift = 54;
  uint64_t csize_mask = 0xff;
  uint64_t compressed_offset_mask = (uint64_t{1} << 54) - 1;

  static Geometry Make(uint32_t cluster_bits, bool extended_l2, uint32_t refcount_order);

  uint64_t subcluster_size() const { return uint64_t{1} << subcluster_bits; }
  uint64_t l2_entries() const { return uint64_t{1} << l2_bits; }
  // Guest bytes one L2 table maps.
  uint64_t l2_coverage() const { return uint64_t{1} << (cluster_bits + l2_bits); }
  uint64_t refblock_entries() const { return uint64_t{1} << refblock_bits; }
  uint64_t l1_index(uint64_t guest) const { return guest >> (cluster_bits + l2_bits); }
  uint64_t l2_index(uint64_t guest) const { return (guest >> cluster_bits) & (l2_entries() - 1); }
  uint64_t offset_in_cluster(uint64_t offset) const { return offset & (cluster_size - 1); }
  uint64_t cluster_floor(uint64_t offset) const { return offset & ~(cluster_size - 1); }
  // L1 entries needed to map `size` guest bytes.
  uint64_t l1_entries_for(uint64_t size) const {
    return (size >> (cluster_bits + l2_bits)) + ((size & (l2_coverage() - 1)) != 0);
  }
  uint64_t clusters_for(uint64_t bytes) const {
    return (bytes >> cluster_bits) + ((bytes & (cluster_size - 1)) != 0);
  }
  // The largest refcount a block entry holds.
  uint64_t refcount_max() const {
    uint32_t bits = 1u << refcount_order;
    return bits == 64 ? UINT64_MAX : (uint64_t{1} << bits) - 1;
  }
};

// What one guest cluster (or, with extended L2 entries, subcluster) reads as.
enum class ClusterKind : uint8_t {
  kUnallocated,  // from the backing file, or zeroes without one
  kZero,         // zeroes; `host` may hold a preallocated cluster
  kData,         // at `host`
  kCompressed,   // the descriptor is the entry itself
  kInvalid,      // an entry the format does not allow
};

struct Mapping {
  ClusterKind kind = ClusterKind::kUnallocated;
  bool copied = false;  // refcount exactly 1: writable in place
  uint64_t host = 0;    // cluster-aligned host offset (kData, and kZero when preallocated)
};

// Classifies a standard (8-byte) L2 entry. Unaligned host offsets are kInvalid.
Mapping ClassifyEntry(const Geometry& geometry, uint64_t entry);
// Classifies subcluster `index` of an extended L2 entry and its bitmap.
Mapping ClassifySubcluster(const Geometry& geometry, uint64_t entry, uint64_t bitmap,
                           uint32_t index);
// Whether every subcluster of an extended entry is well formed (the same check per subcluster
// ClassifySubcluster makes, done once when a table is loaded).
bool ExtendedEntryValid(const Geometry& geometry, uint64_t entry, uint64_t bitmap);

// Where a compressed cluster's bytes are: `size` bytes from `offset` (not aligned); decompression
// stops once it has produced a cluster, so trailing bytes may belong to the next cluster.
struct CompressedExtent {
  uint64_t offset = 0;
  uint64_t size = 0;
};
CompressedExtent DecodeCompressed(const Geometry& geometry, uint64_t entry);
// Whether a compressed descriptor stays within the 56-bit host offset space.
bool CompressedEntryValid(const Geometry& geometry, uint64_t entry);
// The host clusters a compressed cluster's sectors touch (each holds one reference for it):
// [first, first+count).
struct ClusterSpan {
  uint64_t first = 0;
  uint64_t count = 0;
};
ClusterSpan CompressedClusters(const Geometry& geometry, uint64_t entry);

// A refcount block entry of width 2^order bits, at `index` of the block's raw bytes.
uint64_t GetRefcount(const uint8_t* block, uint32_t order, uint64_t index);
void SetRefcount(uint8_t* block, uint32_t order, uint64_t index, uint64_t value);

}  // namespace bexd::block::qcow2
