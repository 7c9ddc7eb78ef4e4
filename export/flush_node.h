// SPDX-License-Identifier: GPL-2.0-or-later
// Control-path durability: makes everything written to a node so far durable, from any thread.
#pragma once

#include <absl/status/status.h>

#include "block/block_node.h"

namespace bexd::exports {

// Sends one kFlush through a queue of its own and waits for it. Used when an export stops, after
// its queue threads have completed their last writes.
absl::Status FlushNode(block::BlockNode& node);

}  // namespace bexd::exports
