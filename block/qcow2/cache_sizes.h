// SPDX-License-Identifier: GPL-2.0-or-later
// The metadata cache sizes from the node's options, computed as QEMU computes them.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>

#include "block/options.h"
#include "block/qcow2/format.h"

namespace bexd::block::qcow2 {

struct CacheSizes {
  uint32_t l2_tables = 0;        // L2 tables cached at once
  uint32_t refcount_blocks = 0;  // refcount blocks cached at once
};

// QEMU's defaults: an L2 cache that maps the whole image, at most 32 MiB, and 4 refcount blocks;
// cache-size splits between the two as in QEMU; never fewer than 2 L2 tables and 4 blocks.
absl::StatusOr<CacheSizes> ComputeCacheSizes(const Qcow2Options& options, const Geometry& geometry,
                                             uint64_t virtual_size);

}  // namespace bexd::block::qcow2
