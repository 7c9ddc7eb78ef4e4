// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/block_query.h"

#include <cstring>
#include <optional>
#include <string>

#include "block/file_node.h"
#include "block/options.h"
#include "block/qcow2/backing_name.h"
#include "block/qcow2/node.h"

namespace bexd::cli {
namespace {

using block::BlockGraph;
using nlohmann::json;

const BlockGraph::Entry* ChildEntry(const BlockGraph& graph, const BlockGraph::Entry& entry,
                                    std::string_view role) {
  const BlockGraph::Child* child = entry.FindChild(role);
  return child == nullptr ? nullptr : graph.Find(child->node_name);
}

// As QEMU: a format node is known by its file child's name.
std::string Filename(const BlockGraph& graph, const BlockGraph::Entry& entry) {
  std::string name = entry.node->filename();
  if (!name.empty()) return name;
  const BlockGraph::Entry* file = ChildEntry(graph, entry, "file");
  return file == nullptr ? name : Filename(graph, *file);
}

// The file node at the bottom of the file children, whose cache modes the node works with.
const block::FileNode* ProtocolNode(const BlockGraph& graph, const BlockGraph::Entry& entry) {
  if (const auto* file = dynamic_cast<const block::FileNode*>(entry.node.get())) return file;
  const BlockGraph::Entry* child = ChildEntry(graph, entry, "file");
  return child == nullptr ? nullptr : ProtocolNode(graph, *child);
}

// QEMU's ImageInfo fields that only a qcow2 image has.
void AddQcow2Info(const block::qcow2::Qcow2Node& node, json* image) {
  const block::qcow2::Qcow2ImageInfo& info = node.info();
  (*image)["cluster-size"] = info.cluster_size;
  (*image)["dirty-flag"] = node.dirty();
  json data = {{"compat", info.version == 2 ? "0.10" : "1.1"},
               {"compression-type", info.compression_type}};
  if (info.version >= 3) {
    data["lazy-refcounts"] = info.lazy_refcounts;
    data["corrupt"] = node.corrupt();
    data["extended-l2"] = info.extended_l2;
  }
  data["refcount-bits"] = info.refcount_bits;
  (*image)["format-specific"] = {{"type", "qcow2"}, {"data", std::move(data)}};
}

json ImageInfo(const BlockGraph& graph, const BlockGraph::Entry& entry, bool flat) {
  // A FUSE passthrough client grows a growable export's file without bexd seeing the write.
  entry.node->RefreshSize();
  json image = {
      {"filename", Filename(graph, entry)},
      {"format", entry.node->driver_name()},
      // QEMU counts lengths in whole 512-byte sectors (bdrv_getlength).
      {"virtual-size", (entry.node->size() + 511) / 512 * 512},
      {"dirty-flag", false},
  };
  if (std::optional<uint64_t> bytes = entry.node->AllocatedBytes()) image["actual-size"] = *bytes;
  const auto* qcow2 = dynamic_cast<const block::qcow2::Qcow2Node*>(entry.node.get());
  if (qcow2 != nullptr) AddQcow2Info(*qcow2, &image);
  const BlockGraph::Entry* backing = ChildEntry(graph, entry, "backing");
  if (qcow2 != nullptr && !qcow2->info().backing_file.empty()) {
    // What the header names, also when another backing node (or none) was given, as QEMU.
    const block::qcow2::Qcow2ImageInfo& info = qcow2->info();
    image["backing-filename"] = info.backing_file;
    absl::StatusOr<std::string> full =
        block::qcow2::ResolveBackingFileName(Filename(graph, entry), info.backing_file);
    image["full-backing-filename"] = full.ok() ? *full : info.backing_file;
    if (!info.backing_format.empty()) image["backing-filename-format"] = info.backing_format;
  } else if (backing != nullptr) {
    image["backing-filename"] = Filename(graph, *backing);
    image["full-backing-filename"] = Filename(graph, *backing);
    image["backing-filename-format"] = backing->node->driver_name();
  }
  if (backing != nullptr && !flat) image["backing-image"] = ImageInfo(graph, *backing, flat);
  return image;
}

json DeviceInfo(const BlockGraph& graph, const BlockGraph::Entry& entry, bool flat) {
  const block::BlockNode& node = *entry.node;
  int depth = 0;
  const BlockGraph::Entry* backing = ChildEntry(graph, entry, "backing");
  for (const BlockGraph::Entry* link = backing; link != nullptr;
       link = ChildEntry(graph, *link, "backing")) {
    ++depth;
  }
  const block::FileNode* protocol = ProtocolNode(graph, entry);
  json info = {
      {"node-name", node.node_name()},
      {"drv", node.driver_name()},
      {"ro", node.read_only()},
      {"file", Filename(graph, entry)},
      {"backing_file_depth", depth},
      // QEMU 10.0's: false only for nodes block-set-active deactivated, which bexd lacks.
      {"active", true},
      {"encrypted", false},
      {"detect_zeroes", block::DetectZeroesName(node.detect_zeroes())},
      {"bps", 0},
      {"bps_rd", 0},
      {"bps_wr", 0},
      {"iops", 0},
      {"iops_rd", 0},
      {"iops_wr", 0},
      {"image", ImageInfo(graph, entry, flat)},
      {"cache",
       {{"writeback", true},
        {"direct", protocol != nullptr && protocol->options().cache_direct},
        {"no-flush", protocol != nullptr && protocol->options().cache_no_flush}}},
      {"write_threshold", 0},
  };
  if (backing != nullptr) info["backing_file"] = Filename(graph, *backing);
  if (int error = node.flush_error(); error != 0) info["flush-error"] = std::strerror(error);
  return info;
}

}  // namespace

json NamedBlockNodesJson(const BlockGraph& graph, bool flat) {
  // Newest first, as QEMU lists them (bdrv_named_nodes_list prepends each node).
  json nodes = json::array();
  for (auto it = graph.entries().rbegin(); it != graph.entries().rend(); ++it) {
    nodes.push_back(DeviceInfo(graph, *it, flat));
  }
  return nodes;
}

}  // namespace bexd::cli
