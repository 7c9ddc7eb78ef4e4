// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/repair.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace bexd::block::qcow2 {
namespace {

class Counter {
 public:
  Counter(const Geometry& g, uint64_t file_size) : g_(g), counts_(g.clusters_for(file_size), 0) {}

  absl::Status Add(uint64_t offset, uint64_t bytes, std::string_view what) {
    if (bytes == 0) return absl::OkStatus();
    uint64_t first = offset >> g_.cluster_bits;
    uint64_t last = (offset + bytes - 1) >> g_.cluster_bits;
    if (last >= counts_.size()) {
      return absl::DataLossError(fmt::format(
          "cannot repair the refcounts: {} at {:#x} lies past the end of the image file", what,
          offset));
    }
    for (uint64_t c = first; c <= last; ++c) {
      if (counts_[c] == UINT16_MAX) {
        return absl::DataLossError(
            fmt::format("cannot repair the refcounts: cluster {:#x} has too many references",
                        c << g_.cluster_bits));
      }
      ++counts_[c];
    }
    return absl::OkStatus();
  }
  uint16_t Get(uint64_t offset) const { return counts_[offset >> g_.cluster_bits]; }
  std::vector<uint16_t>& counts() { return counts_; }

 private:
  const Geometry& g_;
  std::vector<uint16_t> counts_;
};

struct TableRef {
  uint64_t l1_offset;
  uint32_t l1_size;
  bool active;
};

absl::Status ReadFully(SyncIo& io, uint64_t offset, void* buffer, uint64_t length,
                       std::string_view what) {
  int result = io.Read(offset, buffer, length);
  if (result < 0) {
    return absl::ErrnoToStatus(-result,
                               fmt::format("cannot repair the refcounts: reading {}", what));
  }
  return absl::OkStatus();
}

// Counts one L1 table, its L2 tables and their clusters.
absl::Status CountTables(SyncIo& io, const Geometry& g, const TableRef& ref,
                         const std::vector<uint64_t>* active_l1, Counter* counter) {
  std::vector<uint64_t> l1;
  if (active_l1 != nullptr) {
    l1 = *active_l1;
  } else {
    std::vector<uint8_t> bytes(uint64_t{ref.l1_size} * 8);
    absl::Status status =
        ReadFully(io, ref.l1_offset, bytes.data(), bytes.size(), "a snapshot's L1 table");
    if (!status.ok()) return status;
    for (uint32_t i = 0; i < ref.l1_size; ++i) l1.push_back(LoadBe64(bytes.data() + i * 8));
  }
  absl::Status status = counter->Add(ref.l1_offset, l1.size() * 8, "an L1 table");
  if (!status.ok()) return status;
  std::vector<uint8_t> table(g.cluster_size);
  for (uint64_t entry : l1) {
    uint64_t offset = entry & kOffsetMask;
    if (offset == 0) continue;
    if (g.offset_in_cluster(offset) != 0) {
      return absl::DataLossError(fmt::format(
          "cannot repair the refcounts: L2 table offset {:#x} is not cluster aligned", offset));
    }
    status = counter->Add(offset, g.cluster_size, "an L2 table");
    if (!status.ok()) return status;
    status = ReadFully(io, offset, table.data(), g.cluster_size, "an L2 table");
    if (!status.ok()) return status;
    for (uint64_t i = 0; i < g.l2_entries(); ++i) {
      uint64_t l2_entry = LoadBe64(table.data() + i * g.l2_entry_bytes);
      Mapping mapping = ClassifyEntry(g, l2_entry);
      if (mapping.kind == ClusterKind::kInvalid) {
        return absl::DataLossError(
            fmt::format("cannot repair the refcounts: invalid L2 entry {:#x} in the table at {:#x}",
                        l2_entry, offset));
      }
      if (mapping.kind == ClusterKind::kCompressed) {
        ClusterSpan span = CompressedClusters(g, l2_entry);
        status = counter->Add(span.first << g.cluster_bits, span.count << g.cluster_bits,
                              "a compressed cluster");
      } else if (mapping.host != 0) {
        status = counter->Add(mapping.host, g.cluster_size, "a data cluster");
      }
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

// With every reference counted, a COPIED flag must mean exactly one reference.
absl::Status CheckCopiedFlags(SyncIo& io, const Geometry& g, const std::vector<uint64_t>& l1,
                              const Counter& counter) {
  std::vector<uint8_t> table(g.cluster_size);
  for (uint64_t entry : l1) {
    uint64_t offset = entry & kOffsetMask;
    if (offset == 0) continue;
    bool copied = (entry & kOflagCopied) != 0;
    if (copied != (counter.Get(offset) == 1)) {
      return absl::DataLossError(fmt::format(
          "cannot repair the refcounts: the COPIED flag of the L2 table at {:#x} is wrong (run "
          "'qemu-img check -r all')",
          offset));
    }
    absl::Status status = ReadFully(io, offset, table.data(), g.cluster_size, "an L2 table");
    if (!status.ok()) return status;
    for (uint64_t i = 0; i < g.l2_entries(); ++i) {
      uint64_t l2_entry = LoadBe64(table.data() + i * g.l2_entry_bytes);
      Mapping mapping = ClassifyEntry(g, l2_entry);
      if (mapping.kind == ClusterKind::kCompressed || mapping.host == 0) continue;
      if (((l2_entry & kOflagCopied) != 0) != (counter.Get(mapping.host) == 1)) {
        return absl::DataLossError(fmt::format(
            "cannot repair the refcounts: the COPIED flag of the cluster at {:#x} is wrong (run "
            "'qemu-img check -r all')",
            mapping.host));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RebuildRefcounts(SyncIo& io, BlockNode& file, ImageHeader* header,
                              const std::vector<uint64_t>& l1,
                              const std::vector<SnapshotInfo>& snapshots,
                              uint64_t snapshot_table_bytes, std::vector<uint64_t>* reftable) {
  const Geometry& g = header->geometry;
  Counter counter(g, file.size());
  absl::Status status = counter.Add(0, g.cluster_size, "the header");
  if (status.ok() && header->nb_snapshots > 0) {
    status = counter.Add(header->snapshots_offset, snapshot_table_bytes, "the snapshot table");
  }
  if (status.ok()) {
    status = CountTables(io, g, {header->l1_table_offset, header->l1_size, true}, &l1, &counter);
  }
  for (const SnapshotInfo& snapshot : snapshots) {
    if (!status.ok()) break;
    status =
        CountTables(io, g, {snapshot.l1_table_offset, snapshot.l1_size, false}, nullptr, &counter);
  }
  if (status.ok()) status = CheckCopiedFlags(io, g, l1, counter);
  if (!status.ok()) return status;

  // The new refcount blocks and table go after everything else; they count themselves.
  std::vector<uint16_t>& counts = counter.counts();
  const uint64_t per_block = g.refblock_entries();
  uint64_t start = counts.size();
  uint64_t blocks = 0;
  uint64_t table_clusters = 0;
  for (;;) {
    uint64_t end = start + blocks + table_clusters;
    uint64_t want_blocks = (end + per_block - 1) / per_block;
    uint64_t want_table = g.clusters_for(want_blocks * 8);
    if (want_blocks == blocks && want_table == table_clusters) break;
    blocks = want_blocks;
    table_clusters = want_table;
  }
  if ((table_clusters << g.cluster_bits) > kMaxRefcountTableBytes) {
    return absl::ResourceExhaustedError("cannot repair the refcounts: the image is too large");
  }
  uint64_t end = start + blocks + table_clusters;
  counts.resize(end, 0);
  std::fill(counts.begin() + static_cast<ptrdiff_t>(start), counts.end(), 1);
  absl::Status grown = file.Truncate(end << g.cluster_bits);
  if (!grown.ok()) return grown;

  std::vector<uint8_t> block(g.cluster_size);
  for (uint64_t b = 0; b < blocks; ++b) {
    std::memset(block.data(), 0, block.size());
    for (uint64_t i = 0; i < per_block && b * per_block + i < end; ++i) {
      SetRefcount(block.data(), g.refcount_order, i, counts[b * per_block + i]);
    }
    int result = io.Write((start + b) << g.cluster_bits, block.data(), block.size());
    if (result < 0) return absl::ErrnoToStatus(-result, "cannot write a rebuilt refcount block");
  }
  uint64_t table_offset = (start + blocks) << g.cluster_bits;
  std::vector<uint8_t> table(table_clusters << g.cluster_bits, 0);
  std::vector<uint64_t> entries(table.size() / 8, 0);
  for (uint64_t b = 0; b < blocks; ++b) {
    entries[b] = (start + b) << g.cluster_bits;
    StoreBe64(table.data() + b * 8, entries[b]);
  }
  int result = io.Write(table_offset, table.data(), table.size());
  if (result == 0) result = io.Flush();
  uint8_t fields[12];
  StoreBe64(fields, table_offset);
  StoreBe32(fields + 8, static_cast<uint32_t>(table_clusters));
  if (result == 0) result = io.Write(field::kRefcountTableOffset, fields, sizeof(fields));
  if (result == 0) result = io.Flush();
  if (result < 0) return absl::ErrnoToStatus(-result, "cannot write the rebuilt refcount table");
  header->refcount_table_offset = table_offset;
  header->refcount_table_clusters = static_cast<uint32_t>(table_clusters);
  *reftable = std::move(entries);
  return absl::OkStatus();
}

}  // namespace bexd::block::qcow2
