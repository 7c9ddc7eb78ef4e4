// SPDX-License-Identifier: GPL-2.0-or-later
// The internal snapshot table. bexd neither creates nor applies snapshots; it reads the table to
// validate it and to find the snapshots' L1 tables, whose clusters a refcount rebuild must count.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "block/qcow2/format.h"

namespace bexd::block::qcow2 {

struct SnapshotInfo {
  uint64_t l1_table_offset = 0;
  uint32_t l1_size = 0;
  std::string id;
  std::string name;
};

struct SnapshotTable {
  std::vector<SnapshotInfo> snapshots;
  uint64_t bytes = 0;  // the table's length in the file
};

// Parses `count` entries from `data` (the bytes at the table's offset). If `data` ends before the
// table does, fails with OutOfRange and sets *needed to the bytes required so far; the caller
// reads more and calls again. Every snapshot's L1 table is validated against `file_size`.
absl::StatusOr<SnapshotTable> ParseSnapshotTable(std::span<const uint8_t> data, uint32_t count,
                                                 const Geometry& geometry, uint64_t file_size,
                                                 uint64_t* needed);

}  // namespace bexd::block::qcow2
