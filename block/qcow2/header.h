// SPDX-License-Identifier: GPL-2.0-or-later
// Parsing and validation of the qcow2 header and its extensions. The image file is untrusted: every
// field is checked against the format's limits and the file's size before anything uses it.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "block/qcow2/format.h"

namespace bexd::block::qcow2 {

struct ImageHeader {
  uint32_t version = 3;
  uint64_t size = 0;  // virtual size in bytes
  Geometry geometry;
  uint32_t crypt_method = kCryptNone;
  uint32_t l1_size = 0;
  uint64_t l1_table_offset = 0;
  uint64_t refcount_table_offset = 0;
  uint32_t refcount_table_clusters = 0;
  uint32_t nb_snapshots = 0;
  uint64_t snapshots_offset = 0;
  uint64_t incompatible_features = 0;
  uint64_t compatible_features = 0;
  uint64_t autoclear_features = 0;
  uint32_t header_length = kV2HeaderLength;
  uint8_t compression_type = kCompressionZlib;
  std::string backing_file;    // empty: no backing file
  std::string backing_format;  // from the backing format extension, may be empty
  // The bitmaps extension, when present and marked consistent by its autoclear bit.
  bool has_bitmaps = false;
  uint64_t bitmap_directory_offset = 0;
  uint64_t bitmap_directory_size = 0;
};

// Parses the header in `first_cluster`, the image's first bytes (at least the whole first
// cluster when the file has that many; bytes past the end of the buffer read as zeroes, as past
// the end of a file). Fails with a message that names the problem (or every unsupported feature).
// `file_size` bounds the tables the header points to.
absl::StatusOr<ImageHeader> ParseHeader(std::span<const uint8_t> first_cluster, uint64_t file_size);

// Checks that a table of `entries` entries of `entry_size` bytes at `offset` is cluster aligned,
// within `max_bytes` and within the file. `name` starts the error message ("Active L1 table").
absl::Status ValidateTable(const Geometry& geometry, uint64_t offset, uint64_t entries,
                           uint64_t entry_size, uint64_t max_bytes, uint64_t file_size,
                           std::string_view name);

// The byte range a table occupies, rounded to whole clusters.
struct ClusterRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool Overlaps(const ClusterRange& other) const {
    return bytes != 0 && other.bytes != 0 && offset < other.offset + other.bytes &&
           other.offset < offset + bytes;
  }
};

// Fails if the header cluster, the active L1 table, the refcount table and the snapshot table
// overlap each other: every image QEMU writes keeps them apart, and writing through overlapping
// tables would destroy one of them.
absl::Status CheckLayout(const ImageHeader& header, uint64_t snapshot_table_bytes);

}  // namespace bexd::block::qcow2
