// SPDX-License-Identifier: GPL-2.0-or-later
// Opening an image: reading the header, the active L1 table, the refcount table and the snapshot
// table through blocking I/O, validating them, and the header updates a writable open makes
// (clearing unknown autoclear bits, repairing a dirty image).
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "block/block_node.h"
#include "block/qcow2/engine.h"
#include "block/qcow2/sync_io.h"

namespace bexd::block::qcow2 {

struct LoadedImage {
  Engine::Loaded engine;
  // The L1 table for readers: entries that failed validation are marked with bit 0 (reserved in
  // L1 entries), so lookups in their range fail with EIO.
  std::vector<uint64_t> l1_mirror;
};

// Reads the header only.
absl::StatusOr<ImageHeader> ReadImageHeader(SyncIo& io, uint64_t file_size);

// Reads and validates everything; for a writable open also updates the header as QEMU does.
// Errors are the bare reason; the caller names the node. `node_name` names it in log lines.
absl::StatusOr<LoadedImage> LoadImage(SyncIo& io, BlockNode& file, bool writable,
                                      const std::string& node_name);

}  // namespace bexd::block::qcow2
