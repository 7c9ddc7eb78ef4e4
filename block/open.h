#pragma once

#include <absl/status/statusor.h>

#include <memory>

#include "block/block_node.h"
#include "block/options.h"

namespace bexd::block {

// Opens a node with the driver the options name. Errors name the node and the reason.
absl::StatusOr<std::shared_ptr<BlockNode>> OpenBlockNode(const BlockdevOptions& options);

// Opens a qcow2 node over children the caller opened: `file` holds the image, `backing` (null:
// none) serves the clusters the image does not allocate and should be read-only. The backing
// file named in the image (block/qcow2/node.h: ReadQcow2ImageInfo) resolves with
// block/qcow2/backing_name.h.
absl::StatusOr<std::shared_ptr<BlockNode>> OpenQcow2Node(const std::string& node_name,
                                                         const Qcow2Options& options,
                                                         bool read_only,
                                                         std::shared_ptr<BlockNode> file,
                                                         std::shared_ptr<BlockNode> backing);

}  // namespace bexd::block
