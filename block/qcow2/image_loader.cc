// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/image_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "block/qcow2/repair.h"
#include "util/log.h"

namespace bexd::block::qcow2 {
namespace {

constexpr uint64_t kHeaderReadBytes = uint64_t{1} << kMaxClusterBits;
constexpr uint64_t kL1ReservedBits = 0x7f000000000001ffull;

absl::Status IoError(int error, std::string_view what) {
  return absl::ErrnoToStatus(-error, fmt::format("cannot read {}", what));
}

absl::StatusOr<std::vector<uint64_t>> ReadTable(SyncIo& io, uint64_t offset, uint64_t entries,
                                                std::string_view what) {
  std::vector<uint8_t> bytes(entries * 8);
  if (entries > 0) {
    int result = io.Read(offset, bytes.data(), bytes.size());
    if (result < 0) return IoError(result, what);
  }
  std::vector<uint64_t> table(entries);
  for (uint64_t i = 0; i < entries; ++i) table[i] = LoadBe64(bytes.data() + i * 8);
  return table;
}

absl::StatusOr<SnapshotTable> ReadSnapshots(SyncIo& io, const ImageHeader& header,
                                            uint64_t file_size) {
  if (header.nb_snapshots == 0) return SnapshotTable{};
  uint64_t available = file_size - header.snapshots_offset;  // ParseHeader checked the offset
  uint64_t length = std::min<uint64_t>(available, 64 * 1024);
  for (;;) {
    std::vector<uint8_t> bytes(length);
    int result = io.Read(header.snapshots_offset, bytes.data(), length);
    if (result < 0) return IoError(result, "the snapshot table");
    uint64_t needed = 0;
    auto table =
        ParseSnapshotTable(bytes, header.nb_snapshots, header.geometry, file_size, &needed);
    if (table.ok() || !absl::IsOutOfRange(table.status())) return table;
    if (needed > available) {
      return absl::InvalidArgumentError("the snapshot table extends past the end of the file");
    }
    length = std::min(available, std::max(needed, length * 2));
  }
}

// Marks L1 entries that cannot be right (reserved bits, unaligned, past the end of the file).
std::vector<uint64_t> MirrorL1(const std::vector<uint64_t>& l1, const Geometry& g,
                               uint64_t file_size, const std::string& node_name) {
  std::vector<uint64_t> mirror(l1);
  uint64_t invalid = 0;
  for (uint64_t& entry : mirror) {
    uint64_t table = entry & kOffsetMask;
    bool bad = (entry & kL1ReservedBits) != 0 ||
               (table != 0 && (g.offset_in_cluster(table) != 0 || table < g.cluster_size ||
                               table > file_size || g.cluster_size > file_size - table));
    if (!bad) continue;
    entry = kOflagZero;
    ++invalid;
  }
  if (invalid > 0) {
    log::Warn(
        "{} active L1 table entries are invalid; reading or writing their ranges fails with "
        "EIO",
        invalid);
  }
  return mirror;
}

absl::Status CheckRefcountTable(const std::vector<uint64_t>& reftable, const Geometry& g,
                                uint64_t file_size) {
  for (uint64_t i = 0; i < reftable.size(); ++i) {
    uint64_t block = reftable[i];
    if (block == 0) continue;
    if ((block & ~kRefcountTableOffsetMask) != 0 || g.offset_in_cluster(block) != 0 ||
        block < g.cluster_size || block > file_size || g.cluster_size > file_size - block) {
      return absl::InvalidArgumentError(fmt::format(
          "refcount table entry {} ({:#x}) is not a valid refcount block offset", i, block));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteField(SyncIo& io, uint32_t offset, uint64_t value, std::string_view what) {
  uint8_t bytes[8];
  StoreBe64(bytes, value);
  int result = io.Write(offset, bytes, sizeof(bytes));
  if (result == 0) result = io.Flush();
  if (result < 0) return absl::ErrnoToStatus(-result, fmt::format("cannot {}", what));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImageHeader> ReadImageHeader(SyncIo& io, uint64_t file_size) {
  std::vector<uint8_t> bytes(std::min(file_size, kHeaderReadBytes));
  if (!bytes.empty()) {
    int result = io.Read(0, bytes.data(), bytes.size());
    if (result < 0) return IoError(result, "the qcow2 header");
  }
  return ParseHeader(bytes, file_size);
}

absl::StatusOr<LoadedImage> LoadImage(SyncIo& io, BlockNode& file, bool writable,
                                      const std::string& node_name) {
  uint64_t file_size = file.size();
  auto header = ReadImageHeader(io, file_size);
  if (!header.ok()) return header.status();
  const Geometry& g = header->geometry;
  if (writable) {
    if (header->incompatible_features & kIncompatCorrupt) {
      return absl::FailedPreconditionError(
          "the image is marked corrupt and can only be opened read-only (repair it with "
          "'qemu-img check -r all')");
    }
    if (g.refcount_order != 4) {
      return absl::UnimplementedError(fmt::format(
          "{}-bit refcounts can be read but not written (bexd writes 16-bit refcounts); open "
          "the image read-only",
          1u << g.refcount_order));
    }
    if (g.extended_l2) {
      return absl::UnimplementedError(
          "images with extended L2 entries (subclusters) can be read but not written; open the "
          "image read-only");
    }
  }

  LoadedImage loaded;
  Engine::Loaded& out = loaded.engine;
  out.file_size = file_size;
  auto l1 = ReadTable(io, header->l1_table_offset, header->l1_size, "the L1 table");
  if (!l1.ok()) return l1.status();
  auto reftable = ReadTable(io, header->refcount_table_offset,
                            uint64_t{header->refcount_table_clusters} << (g.cluster_bits - 3),
                            "the refcount table");
  if (!reftable.ok()) return reftable.status();
  auto snapshots = ReadSnapshots(io, *header, file_size);
  if (!snapshots.ok()) return snapshots.status();
  absl::Status layout = CheckLayout(*header, snapshots->bytes);
  absl::Status refcounts = CheckRefcountTable(*reftable, g, file_size);
  if (writable) {
    // Writing through overlapping tables or a broken refcount table would destroy data.
    if (!layout.ok()) return layout;
    if (!refcounts.ok()) return refcounts;
  } else {
    if (!layout.ok()) {
      log::Warn("node '{}': {} (the image may be damaged)", node_name,
                std::string(layout.message()));
    }
    // Reads never look at refcounts.
    if (!refcounts.ok()) std::fill(reftable->begin(), reftable->end(), 0);
  }
  loaded.l1_mirror = MirrorL1(*l1, g, file_size, node_name);

  if (writable) {
    // Autoclear bits flag extension data (bitmaps) as consistent; bexd does not keep it
    // up to date, so it clears them before changing anything, as the format asks.
    if (header->autoclear_features & ~kAutoclearMaintained) {
      absl::Status status = WriteField(io, field::kAutoclearFeatures,
                                       header->autoclear_features & kAutoclearMaintained,
                                       "clear the autoclear feature bits");
      if (!status.ok()) return status;
      header->autoclear_features &= kAutoclearMaintained;
      header->has_bitmaps = false;
    }
    if (header->incompatible_features & kIncompatDirty) {
      // Refcounts may lag behind (lazy refcounts): rebuild them, as QEMU repairs such an image
      // when it opens it writable.
      log::Info("node '{}': the image is dirty (lazy refcounts); repairing its refcounts",
                node_name);
      absl::Status status = RebuildRefcounts(io, file, &*header, *l1, snapshots->snapshots,
                                             snapshots->bytes, &*reftable);
      if (!status.ok()) return status;
      log::Info("node '{}': refcounts rebuilt; new refcount table at {:#x}", node_name,
                header->refcount_table_offset);
      status = WriteField(io, field::kIncompatibleFeatures,
                          header->incompatible_features & ~kIncompatDirty,
                          "clear the dirty bit after repairing the refcounts");
      if (!status.ok()) return status;
      header->incompatible_features &= ~kIncompatDirty;
      out.file_size = file.size();
    }
  }
  out.header = std::move(*header);
  out.l1 = std::move(*l1);
  out.reftable = std::move(*reftable);
  out.snapshots = std::move(snapshots->snapshots);
  out.snapshot_table_bytes = snapshots->bytes;
  return loaded;
}

}  // namespace bexd::block::qcow2
