// SPDX-License-Identifier: GPL-2.0-or-later
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <optional>

#include "block/block_node.h"
#include "block/options.h"

namespace bexd::block {

// The open children a format node is opened over (BlockGraph opens them first).
struct NodeChildren {
  std::shared_ptr<BlockNode> file;
  std::shared_ptr<BlockNode> backing;  // nullptr: none
};

// Opens a node with the driver the options name over `children`; options.file and
// options.backing are the graph's business and not looked at here. Errors name the node and the
// reason.
absl::StatusOr<std::shared_ptr<BlockNode>> OpenBlockNode(const BlockdevOptions& options,
                                                         const NodeChildren& children = {});

// For a format node whose options leave `backing` unset: the options of the backing node its
// image names (read-only, defined inline, so named automatically), or nullopt if it names none
// or the driver has no backing files.
absl::StatusOr<std::optional<BlockdevOptions>> ImageBackingOptions(
    const BlockdevOptions& options, const std::shared_ptr<BlockNode>& file);

}  // namespace bexd::block
