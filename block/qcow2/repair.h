// SPDX-License-Identifier: GPL-2.0-or-later
// Rebuilding the refcounts of an image whose dirty bit says they may lag behind its tables (it was
// written with lazy refcounts and not closed cleanly). QEMU repairs such an image when it opens it
// writable; so does bexd, before it serves any I/O.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <vector>

#include "block/block_node.h"
#include "block/qcow2/header.h"
#include "block/qcow2/snapshots.h"
#include "block/qcow2/sync_io.h"

namespace bexd::block::qcow2 {

// Counts every reference (the header, the active and snapshot L1 tables, their L2 tables and data
// clusters, the snapshot table), then writes a new refcount table and blocks after the end of the
// file and points the header at them; the old refcount structure becomes free space. A crash
// before the header update leaves the old structure and the dirty bit, so the next open repairs
// again. Fails, changing nothing, if a reference points outside the file or the COPIED flags
// disagree with the references (that needs 'qemu-img check -r all').
absl::Status RebuildRefcounts(SyncIo& io, BlockNode& file, ImageHeader* header,
                              const std::vector<uint64_t>& l1,
                              const std::vector<SnapshotInfo>& snapshots,
                              uint64_t snapshot_table_bytes, std::vector<uint64_t>* reftable);

}  // namespace bexd::block::qcow2
