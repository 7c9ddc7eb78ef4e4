// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/snapshots.h"

#include <fmt/format.h>

#include "block/qcow2/header.h"

namespace bexd::block::qcow2 {
namespace {

constexpr uint64_t kEntryHeaderBytes = 40;

}  // namespace

absl::StatusOr<SnapshotTable> ParseSnapshotTable(std::span<const uint8_t> data, uint32_t count,
                                                 const Geometry& geometry, uint64_t file_size,
                                                 uint64_t* needed) {
  SnapshotTable table;
  uint64_t offset = 0;
  auto need = [&](uint64_t end) -> absl::Status {
    if (end > kMaxSnapshotTableBytes) {
      return absl::InvalidArgumentError(
          fmt::format("snapshot table is too large (more than {} bytes)", kMaxSnapshotTableBytes));
    }
    if (end > data.size()) {
      *needed = end;
      return absl::OutOfRangeError("snapshot table continues past the bytes read");
    }
    return absl::OkStatus();
  };
  for (uint32_t i = 0; i < count; ++i) {
    absl::Status status = need(offset + kEntryHeaderBytes);
    if (!status.ok()) return status;
    const uint8_t* entry = data.data() + offset;
    SnapshotInfo info;
    info.l1_table_offset = LoadBe64(entry);
    info.l1_size = LoadBe32(entry + 8);
    uint16_t id_size = LoadBe16(entry + 12);
    uint16_t name_size = LoadBe16(entry + 14);
    uint32_t extra_size = LoadBe32(entry + 36);
    if (extra_size > kMaxSnapshotExtraData) {
      return absl::InvalidArgumentError(
          fmt::format("snapshot {} has too much extra data ({} bytes, at most {})", i, extra_size,
                      kMaxSnapshotExtraData));
    }
    uint64_t id_at = offset + kEntryHeaderBytes + extra_size;
    uint64_t end = id_at + id_size + name_size;
    status = need(end);
    if (!status.ok()) return status;
    info.id.assign(reinterpret_cast<const char*>(data.data() + id_at), id_size);
    info.name.assign(reinterpret_cast<const char*>(data.data() + id_at + id_size), name_size);
    status = ValidateTable(geometry, info.l1_table_offset, info.l1_size, sizeof(uint64_t),
                           kMaxL1Bytes, file_size, fmt::format("snapshot '{}' L1 table", info.id));
    if (!status.ok()) return status;
    table.snapshots.push_back(std::move(info));
    offset = (end + 7) & ~uint64_t{7};
  }
  if (offset > kMaxSnapshotTableBytes) {
    return absl::InvalidArgumentError("snapshot table is too large");
  }
  table.bytes = offset;
  return table;
}

}  // namespace bexd::block::qcow2
