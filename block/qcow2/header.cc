// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/header.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

namespace bexd::block::qcow2 {
namespace {

// A bounds-checked view of the first cluster: bytes past the buffer read as zeroes.
class HeaderBytes {
 public:
  HeaderBytes(std::span<const uint8_t> data, uint64_t limit) : data_(data), limit_(limit) {}

  void Read(uint64_t offset, void* out, uint64_t length) const {
    auto* bytes = static_cast<uint8_t*>(out);
    std::fill(bytes, bytes + length, 0);
    if (offset >= data_.size()) return;
    uint64_t available = std::min<uint64_t>(length, data_.size() - offset);
    std::copy_n(data_.data() + offset, available, bytes);
  }
  uint32_t Be32(uint64_t offset) const {
    uint8_t bytes[4];
    Read(offset, bytes, sizeof(bytes));
    return LoadBe32(bytes);
  }
  uint64_t Be64(uint64_t offset) const {
    uint8_t bytes[8];
    Read(offset, bytes, sizeof(bytes));
    return LoadBe64(bytes);
  }
  std::string String(uint64_t offset, uint64_t length) const {
    std::string text(length, '\0');
    Read(offset, text.data(), length);
    return text;
  }
  uint64_t limit() const { return limit_; }

 private:
  std::span<const uint8_t> data_;
  uint64_t limit_;
};

constexpr uint32_t kFeatureEntryBytes = 48;
constexpr uint32_t kFeatureNameBytes = 46;
constexpr uint32_t kBitmapsExtensionBytes = 24;
constexpr uint32_t kMaxBitmaps = 65535;
constexpr uint64_t kMaxBitmapDirectoryBytes = uint64_t{1024} * kMaxBitmaps;
// QEMU keeps the backing format in a 16-byte buffer.
constexpr uint32_t kMaxBackingFormatLength = 15;

struct Extensions {
  std::string backing_format;
  std::string feature_table;
  bool bitmaps = false;
  uint64_t bitmap_directory_offset = 0;
  uint64_t bitmap_directory_size = 0;
};

absl::Status ReadExtensions(const HeaderBytes& bytes, uint64_t start, uint64_t end,
                            uint64_t autoclear, const Geometry& geometry, Extensions* out) {
  uint64_t offset = start;
  while (offset < end) {
    uint32_t magic = bytes.Be32(offset);
    uint32_t length = bytes.Be32(offset + 4);
    offset += 8;
    if (offset > end || length > end - offset) {
      return absl::InvalidArgumentError(
          fmt::format("header extension 0x{:08x} is too large ({} bytes)", magic, length));
    }
    switch (magic) {
      case kExtEnd:
        return absl::OkStatus();
      case kExtBackingFormat:
        if (length > kMaxBackingFormatLength) {
          return absl::InvalidArgumentError(
              fmt::format("backing format name is too long ({} bytes)", length));
        }
        out->backing_format = bytes.String(offset, length);
        break;
      case kExtFeatureTable:
        out->feature_table = bytes.String(offset, length);
        break;
      case kExtBitmaps: {
        if (length != kBitmapsExtensionBytes) {
          return absl::InvalidArgumentError(fmt::format("bitmaps extension has {} bytes, not {}",
                                                        length, kBitmapsExtensionBytes));
        }
        // Without its autoclear bit the extension is stale (QEMU ignores it likewise).
        if (!(autoclear & kAutoclearBitmaps)) break;
        uint32_t count = bytes.Be32(offset);
        uint32_t reserved = bytes.Be32(offset + 4);
        uint64_t directory_size = bytes.Be64(offset + 8);
        uint64_t directory_offset = bytes.Be64(offset + 16);
        if (reserved != 0) {
          return absl::InvalidArgumentError("bitmaps extension: reserved field is not zero");
        }
        if (count == 0 || count > kMaxBitmaps) {
          return absl::InvalidArgumentError(
              fmt::format("bitmaps extension: invalid bitmap count {}", count));
        }
        if (geometry.offset_in_cluster(directory_offset) != 0 ||
            directory_size > kMaxBitmapDirectoryBytes) {
          return absl::InvalidArgumentError(
              fmt::format("bitmaps extension: invalid bitmap directory (offset {}, {} bytes)",
                          directory_offset, directory_size));
        }
        out->bitmaps = true;
        out->bitmap_directory_offset = directory_offset;
        out->bitmap_directory_size = directory_size;
        break;
      }
      default:
        break;  // the crypto header and data file name matter only for refused features
    }
    offset += (uint64_t{length} + 7) & ~uint64_t{7};
  }
  return absl::OkStatus();
}

// The name the image's feature table gives an incompatible feature bit.
std::string FeatureName(const std::string& table, uint32_t bit) {
  for (size_t at = 0; at + kFeatureEntryBytes <= table.size(); at += kFeatureEntryBytes) {
    if (table[at] == 0 && static_cast<uint8_t>(table[at + 1]) == bit) {
      std::string name = table.substr(at + 2, kFeatureNameBytes);
      name.resize(std::min(name.size(), name.find('\0')));
      if (!name.empty()) return name;
    }
  }
  return fmt::format("unknown incompatible feature bit {}", bit);
}

// Everything about the image that bexd cannot serve, named, or OK.
absl::Status CheckSupported(uint64_t incompatible, uint32_t crypt_method,
                            const std::string& feature_table) {
  std::vector<std::string> unsupported;
  if (crypt_method == kCryptAes) unsupported.push_back("encryption (AES)");
  if (crypt_method == kCryptLuks) unsupported.push_back("encryption (LUKS)");
  if (crypt_method > kCryptLuks) {
    unsupported.push_back(fmt::format("encryption (method {})", crypt_method));
  }
  if (incompatible & kIncompatDataFile) unsupported.push_back("external data file");
  for (uint32_t bit = 0; bit < 64; ++bit) {
    if ((incompatible >> bit & 1) && !(kIncompatKnown >> bit & 1)) {
      unsupported.push_back(FeatureName(feature_table, bit));
    }
  }
  if (unsupported.empty()) return absl::OkStatus();
  return absl::UnimplementedError(
      fmt::format("unsupported qcow2 feature(s): {}", fmt::join(unsupported, ", ")));
}

}  // namespace

absl::Status ValidateTable(const Geometry& geometry, uint64_t offset, uint64_t entries,
                           uint64_t entry_size, uint64_t max_bytes, uint64_t file_size,
                           std::string_view name) {
  if (entries > max_bytes / entry_size) {
    return absl::InvalidArgumentError(
        fmt::format("{} is too large ({} entries, at most {} bytes)", name, entries, max_bytes));
  }
  if (geometry.offset_in_cluster(offset) != 0 || offset > kMaxHostOffset) {
    return absl::InvalidArgumentError(
        fmt::format("{} offset {:#x} is invalid (not cluster aligned)", name, offset));
  }
  uint64_t bytes = entries * entry_size;
  if (bytes > 0 && (offset > file_size || bytes > file_size - offset)) {
    return absl::InvalidArgumentError(
        fmt::format("{} (offset {:#x}, {} bytes) extends past the end of the image file ({} "
                    "bytes)",
                    name, offset, bytes, file_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<ImageHeader> ParseHeader(std::span<const uint8_t> first_cluster,
                                        uint64_t file_size) {
  HeaderBytes bytes(first_cluster, file_size);
  if (first_cluster.size() < kV2HeaderLength || bytes.Be32(0) != kMagic) {
    return absl::InvalidArgumentError("the image is not in qcow2 format (no qcow2 magic)");
  }
  ImageHeader header;
  header.version = bytes.Be32(field::kVersion);
  if (header.version < 2 || header.version > 3) {
    return absl::UnimplementedError(fmt::format("unsupported qcow2 version {}", header.version));
  }
  uint32_t cluster_bits = bytes.Be32(field::kClusterBits);
  if (cluster_bits < kMinClusterBits || cluster_bits > kMaxClusterBits) {
    return absl::InvalidArgumentError(fmt::format(
        "unsupported cluster size 2^{} (qcow2 allows 512 bytes to 2 MiB)", cluster_bits));
  }
  uint64_t cluster_size = uint64_t{1} << cluster_bits;
  uint64_t backing_file_offset = bytes.Be64(field::kBackingFileOffset);
  uint32_t backing_file_size = bytes.Be32(field::kBackingFileSize);
  // QEMU counts an image's size in whole 512-byte sectors and drops a partial last one (only a
  // hand-edited header has one); so does bexd, so both show the same disk.
  header.size = bytes.Be64(field::kSize) & ~uint64_t{511};
  header.crypt_method = bytes.Be32(field::kCryptMethod);
  header.l1_size = bytes.Be32(field::kL1Size);
  header.l1_table_offset = bytes.Be64(field::kL1TableOffset);
  header.refcount_table_offset = bytes.Be64(field::kRefcountTableOffset);
  header.refcount_table_clusters = bytes.Be32(field::kRefcountTableClusters);
  header.nb_snapshots = bytes.Be32(field::kNbSnapshots);
  header.snapshots_offset = bytes.Be64(field::kSnapshotsOffset);

  uint32_t refcount_order = 4;
  if (header.version >= 3) {
    header.incompatible_features = bytes.Be64(field::kIncompatibleFeatures);
    header.compatible_features = bytes.Be64(field::kCompatibleFeatures);
    header.autoclear_features = bytes.Be64(field::kAutoclearFeatures);
    refcount_order = bytes.Be32(field::kRefcountOrder);
    header.header_length = bytes.Be32(field::kHeaderLength);
    if (header.header_length < kV3MinHeaderLength) {
      return absl::InvalidArgumentError(
          fmt::format("qcow2 header is too short ({} bytes)", header.header_length));
    }
    if (header.header_length % 8 != 0) {
      return absl::InvalidArgumentError(
          fmt::format("qcow2 header length {} is not a multiple of 8", header.header_length));
    }
  }
  if (header.header_length > cluster_size) {
    return absl::InvalidArgumentError(
        fmt::format("qcow2 header ({} bytes) exceeds the cluster size", header.header_length));
  }
  if (backing_file_offset > cluster_size) {
    return absl::InvalidArgumentError(fmt::format(
        "invalid backing file name offset {} (past the first cluster)", backing_file_offset));
  }
  if (header.header_length > field::kCompressionType) {
    uint8_t type = 0;
    bytes.Read(field::kCompressionType, &type, 1);
    header.compression_type = type;
  }
  if (header.compression_type > kCompressionZstd) {
    return absl::UnimplementedError(
        fmt::format("unknown compression type {}", header.compression_type));
  }
  bool type_bit = (header.incompatible_features & kIncompatCompressionType) != 0;
  if (type_bit != (header.compression_type != kCompressionZlib)) {
    return absl::InvalidArgumentError(
        fmt::format("the compression type incompatible feature bit must be {} for compression "
                    "type {}",
                    type_bit ? "clear" : "set", header.compression_type));
  }

  Extensions extensions;
  uint64_t extensions_end = backing_file_offset != 0 ? backing_file_offset : cluster_size;
  bool extended_l2 = (header.incompatible_features & kIncompatExtendedL2) != 0;
  if (refcount_order > 6) {
    return absl::InvalidArgumentError(
        fmt::format("refcount width 2^{} bits is too large (at most 64 bits)", refcount_order));
  }
  header.geometry = Geometry::Make(cluster_bits, extended_l2, refcount_order);
  absl::Status status = ReadExtensions(bytes, header.header_length, extensions_end,
                                       header.autoclear_features, header.geometry, &extensions);
  // A feature bexd cannot serve is the clearest explanation, even if an extension is broken.
  absl::Status supported =
      CheckSupported(header.incompatible_features, header.crypt_method, extensions.feature_table);
  if (!supported.ok()) return supported;
  if (!status.ok()) return status;
  header.backing_format = extensions.backing_format;
  header.has_bitmaps = extensions.bitmaps;
  header.bitmap_directory_offset = extensions.bitmap_directory_offset;
  header.bitmap_directory_size = extensions.bitmap_directory_size;

  if (extended_l2 && header.geometry.subcluster_size() < (uint64_t{1} << kMinClusterBits)) {
    return absl::InvalidArgumentError(fmt::format(
        "extended L2 entries need clusters of at least 16 KiB (cluster size {})", cluster_size));
  }
  if (backing_file_offset != 0) {
    uint64_t room = std::min<uint64_t>(kMaxBackingNameLength, cluster_size - backing_file_offset);
    if (backing_file_size > room) {
      return absl::InvalidArgumentError(
          fmt::format("backing file name is too long ({} bytes)", backing_file_size));
    }
    header.backing_file = bytes.String(backing_file_offset, backing_file_size);
    if (header.backing_file.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("backing file name contains a NUL byte");
    }
  }

  const Geometry& g = header.geometry;
  if (header.size > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(fmt::format("virtual size {} is too large", header.size));
  }
  if (header.refcount_table_clusters == 0) {
    return absl::InvalidArgumentError("the image has no refcount table");
  }
  status = ValidateTable(g, header.refcount_table_offset, header.refcount_table_clusters,
                         cluster_size, kMaxRefcountTableBytes, file_size, "refcount table");
  if (!status.ok()) return status;
  constexpr uint64_t kSnapshotHeaderBytes = 40;
  status = ValidateTable(g, header.snapshots_offset, header.nb_snapshots, kSnapshotHeaderBytes,
                         kSnapshotHeaderBytes * kMaxSnapshots, file_size, "snapshot table");
  if (!status.ok()) return status;
  status = ValidateTable(g, header.l1_table_offset, header.l1_size, sizeof(uint64_t), kMaxL1Bytes,
                         file_size, "active L1 table");
  if (!status.ok()) return status;
  uint64_t l1_needed = g.l1_entries_for(header.size);
  if (l1_needed > kMaxL1Bytes / sizeof(uint64_t)) {
    return absl::InvalidArgumentError(fmt::format(
        "virtual size {} is too large for {}-byte clusters", header.size, cluster_size));
  }
  if (header.l1_size < l1_needed) {
    return absl::InvalidArgumentError(
        fmt::format("L1 table is too small ({} entries; {} bytes need {})", header.l1_size,
                    header.size, l1_needed));
  }
  return header;
}

absl::Status CheckLayout(const ImageHeader& header, uint64_t snapshot_table_bytes) {
  const Geometry& g = header.geometry;
  auto rounded = [&](uint64_t offset, uint64_t bytes) {
    return ClusterRange{offset, g.clusters_for(bytes) << g.cluster_bits};
  };
  struct Named {
    const char* name;
    ClusterRange range;
  };
  const Named tables[] = {
      {"the header", ClusterRange{0, g.cluster_size}},
      {"the active L1 table", rounded(header.l1_table_offset, uint64_t{header.l1_size} * 8)},
      {"the refcount table", rounded(header.refcount_table_offset,
                                     uint64_t{header.refcount_table_clusters} << g.cluster_bits)},
      {"the snapshot table", rounded(header.snapshots_offset, snapshot_table_bytes)},
  };
  for (size_t i = 0; i < std::size(tables); ++i) {
    for (size_t j = i + 1; j < std::size(tables); ++j) {
      if (tables[i].range.Overlaps(tables[j].range)) {
        return absl::InvalidArgumentError(
            fmt::format("{} (offset {:#x}) overlaps {} (offset {:#x})", tables[j].name,
                        tables[j].range.offset, tables[i].name, tables[i].range.offset));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace bexd::block::qcow2
