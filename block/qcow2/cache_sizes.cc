// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/cache_sizes.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <climits>

namespace bexd::block::qcow2 {
namespace {

constexpr uint64_t kDefaultL2CacheMax = uint64_t{32} << 20;
constexpr uint64_t kMinL2Tables = 2;
constexpr uint64_t kMinRefcountBlocks = 4;

}  // namespace

absl::StatusOr<CacheSizes> ComputeCacheSizes(const Qcow2Options& options, const Geometry& geometry,
                                             uint64_t virtual_size) {
  const uint64_t cluster = geometry.cluster_size;
  uint64_t clusters = geometry.clusters_for(virtual_size);
  uint64_t needed_bytes = clusters * geometry.l2_entry_bytes;
  uint64_t max_l2 = (needed_bytes + cluster - 1) / cluster * cluster;
  uint64_t min_refcount = kMinRefcountBlocks * cluster;
  uint64_t l2_setting = options.l2_cache_size.value_or(kDefaultL2CacheMax);
  uint64_t l2 = std::min(max_l2, l2_setting);
  uint64_t refcount = options.refcount_cache_size.value_or(0);
  if (const std::optional<uint64_t> entry = options.l2_cache_entry_size;
      entry && (*entry < 512 || *entry > cluster || !std::has_single_bit(*entry))) {
    // QEMU's text (qcow2_update_options_prepare).
    return absl::InvalidArgumentError(
        fmt::format("L2 cache entry size must be a power of two between 512 and the cluster "
                    "size ({})",
                    cluster));
  }
  if (options.cache_size) {
    uint64_t combined = *options.cache_size;
    if (options.l2_cache_size && options.refcount_cache_size) {
      return absl::InvalidArgumentError(
          "cache-size, l2-cache-size and refcount-cache-size may not be set at the same time");
    }
    if (options.l2_cache_size && l2_setting > combined) {
      return absl::InvalidArgumentError("l2-cache-size may not exceed cache-size");
    }
    if (refcount > combined) {
      return absl::InvalidArgumentError("refcount-cache-size may not exceed cache-size");
    }
    if (options.l2_cache_size) {
      refcount = combined - l2;
    } else if (options.refcount_cache_size) {
      l2 = combined - refcount;
    } else if (combined >= max_l2 + min_refcount) {
      l2 = max_l2;
      refcount = combined - l2;
    } else {
      refcount = std::min(combined, min_refcount);
      l2 = combined - refcount;
    }
  }
  uint64_t tables = std::max(kMinL2Tables, l2 / cluster);
  uint64_t blocks = std::max(kMinRefcountBlocks, refcount / cluster);
  if (tables > INT_MAX) return absl::InvalidArgumentError("l2-cache-size is too large");
  if (blocks > INT_MAX) return absl::InvalidArgumentError("refcount-cache-size is too large");
  return CacheSizes{static_cast<uint32_t>(tables), static_cast<uint32_t>(blocks)};
}

}  // namespace bexd::block::qcow2
