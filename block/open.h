#pragma once

#include <absl/status/statusor.h>

#include <memory>

#include "block/block_node.h"
#include "block/options.h"

namespace bexd::block {

// Opens a node with the driver the options name. Errors name the node and the reason.
absl::StatusOr<std::shared_ptr<BlockNode>> OpenBlockNode(const BlockdevOptions& options);

}  // namespace bexd::block
