// SPDX-License-Identifier: GPL-2.0-or-later
// The `null` driver: a node of a given size that stores nothing, for measuring everything above
// the driver. Like QEMU's null-co: reads return zeroes only with read-zeroes; latency-ns delays
// every completion without blocking the queue thread.
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <string>

#include "block/block_node.h"
#include "block/options.h"

namespace bexd::block {

absl::StatusOr<std::shared_ptr<BlockNode>> OpenNullNode(std::string node_name,
                                                        const NullOptions& options, bool read_only);

}  // namespace bexd::block
