// SPDX-License-Identifier: GPL-2.0-or-later
// QEMU's permission system (block.c: bdrv_check_perm), reduced to what bexd's drivers and exports
// take: users of one node may read; write and resize are taken or refused to share per user.
#include <absl/strings/str_join.h>
#include <fmt/format.h>

#include <vector>

#include "block/graph.h"

namespace bexd::block {
namespace {

std::string PermissionNames(uint8_t permissions) {
  std::vector<std::string> names;
  if (permissions & BlockGraph::kWrite) names.push_back("write");
  if (permissions & BlockGraph::kResize) names.push_back("resize");
  return absl::StrJoin(names, ", ");
}

}  // namespace

BlockGraph::ChildPermissions BlockGraph::PermissionsFor(const BlockdevOptions& parent,
                                                        std::string_view role) {
  // force-share (read-only nodes only): the node takes nothing and refuses nothing to others.
  if (parent.force_share) return {};
  if (std::holds_alternative<Qcow2Options>(parent.driver)) {
    // The backing child is only read; QEMU lets others write it when the qcow2 node's own users
    // (exports) let others write, which they always do.
    if (role == "backing") return {};
    return {.taken = static_cast<uint8_t>(parent.read_only ? 0 : kWrite | kResize),
            .unshared = kWrite | kResize};
  }
  if (const auto* raw = std::get_if<RawOptions>(&parent.driver)) {
    // Without offset and size raw is a filter; with them its window must not move.
    const bool window = raw->offset != 0 || raw->size.has_value();
    return {.unshared = static_cast<uint8_t>(window ? kResize : 0),
            .pass_taken = true,
            .pass_unshared = true};
  }
  return {};
}

std::vector<BlockGraph::Use> BlockGraph::UsesOf(std::string_view node_name) const {
  std::vector<Use> uses;
  for (const Entry& entry : entries_) {
    const std::string& parent = entry.node->node_name();
    for (const Child& child : entry.children) {
      if (child.node_name != node_name) continue;
      const ChildPermissions& permissions = child.permissions;
      uses.push_back(
          Use{.taken = static_cast<uint8_t>(permissions.taken |
                                            (permissions.pass_taken ? Taken(parent) : 0)),
              .unshared = static_cast<uint8_t>(permissions.unshared |
                                               (permissions.pass_unshared ? Unshared(parent) : 0)),
              .user = fmt::format("node '{}'", parent),
              .role = child.role,
              .parent_node = parent});
    }
    if (parent != node_name) continue;
    for (const Exporter& exporter : entry.exporters) {
      uses.push_back(Use{.taken = static_cast<uint8_t>(exporter.writable ? kWrite | kResize : 0),
                         .user = fmt::format("export '{}'", exporter.id),
                         .role = "root"});
    }
  }
  return uses;
}

uint8_t BlockGraph::Taken(std::string_view node_name) const {
  uint8_t taken = 0;
  for (const Use& use : UsesOf(node_name)) taken |= use.taken;
  return taken;
}

uint8_t BlockGraph::Unshared(std::string_view node_name) const {
  uint8_t unshared = 0;
  for (const Use& use : UsesOf(node_name)) unshared |= use.unshared;
  return unshared;
}

absl::Status BlockGraph::CheckNewUse(std::string_view node_name, const Use& use) const {
  // QEMU's error (bdrv_a_allow_b).
  auto conflict = [&](uint8_t permissions, const Use& required_by, const Use& unshared_by) {
    return absl::FailedPreconditionError(fmt::format(
        "Permission conflict on node '{}': permissions '{}' are both required by {} (uses node "
        "'{}' as '{}' child) and unshared by {} (uses node '{}' as '{}' child).",
        node_name, PermissionNames(permissions), required_by.user, node_name, required_by.role,
        unshared_by.user, node_name, unshared_by.role));
  };
  uint8_t taken = use.taken;
  uint8_t unshared = use.unshared;
  for (const Use& other : UsesOf(node_name)) {
    const bool replaced =
        !use.parent_node.empty() && other.parent_node == use.parent_node && other.role == use.role;
    if (replaced) continue;
    if (uint8_t both = other.taken & use.unshared) return conflict(both, other, use);
    if (uint8_t both = use.taken & other.unshared) return conflict(both, use, other);
    taken |= other.taken;
    unshared |= other.unshared;
  }
  const Entry* entry = Find(node_name);
  if (entry == nullptr) return absl::OkStatus();
  for (const Child& child : entry->children) {
    const ChildPermissions& permissions = child.permissions;
    if (!permissions.pass_taken && !permissions.pass_unshared) continue;
    Use passed{
        .taken = static_cast<uint8_t>(permissions.taken | (permissions.pass_taken ? taken : 0)),
        .unshared =
            static_cast<uint8_t>(permissions.unshared | (permissions.pass_unshared ? unshared : 0)),
        .user = fmt::format("node '{}'", node_name),
        .role = child.role,
        .parent_node = std::string(node_name)};
    absl::Status status = CheckNewUse(child.node_name, passed);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status BlockGraph::CheckExport(std::string_view node_name, std::string_view id,
                                     bool writable) const {
  if (!writable) return absl::OkStatus();
  // As QEMU's exports: write first, then resize, so the error names the first one refused.
  for (uint8_t taken : {uint8_t{kWrite}, uint8_t{kWrite | kResize}}) {
    absl::Status status = CheckNewUse(
        node_name, Use{.taken = taken, .user = fmt::format("export '{}'", id), .role = "root"});
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status BlockGraph::CheckResize(std::string_view node_name) const {
  // QEMU's block_resize takes resize through a block backend of its own, sharing everything.
  return CheckNewUse(node_name,
                     Use{.taken = kResize, .user = "an unnamed block device", .role = "root"});
}

}  // namespace bexd::block
