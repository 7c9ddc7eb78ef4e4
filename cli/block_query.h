// query-named-block-nodes: the block graph in QEMU's shapes (BlockDeviceInfo, ImageInfo).
#pragma once

#include <nlohmann/json.hpp>

#include "block/graph.h"

namespace bexd::cli {

// One BlockDeviceInfo per node, children included.
nlohmann::json NamedBlockNodesJson(const block::BlockGraph& graph);

}  // namespace bexd::cli
