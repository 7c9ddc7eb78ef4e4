// SPDX-License-Identifier: GPL-2.0-or-later
// query-named-block-nodes: the block graph in QEMU's shapes (BlockDeviceInfo, ImageInfo).
#pragma once

#include <nlohmann/json.hpp>

#include "block/graph.h"

namespace bexd::cli {

// One BlockDeviceInfo per node, children included; `flat` leaves out each image's nested
// backing-image, as QEMU's flat=true does.
nlohmann::json NamedBlockNodesJson(const block::BlockGraph& graph, bool flat);

}  // namespace bexd::cli
