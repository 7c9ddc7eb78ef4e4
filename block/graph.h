// The block graph: every open node by name, the edges from format nodes to their children, and
// who uses each node. Nodes come from --blockdev and blockdev-add (owned by the monitor, as QEMU
// says) or are defined inline in a parent's options (owned by that parent: named automatically
// when they have no node-name, and closed with the last parent that refers to them). Main thread
// only.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "block/block_node.h"
#include "block/options.h"

namespace bexd::block {

class BlockGraph {
 public:
  // An edge from a parent to a child node.
  struct Child {
    std::string role;  // "file" or "backing"
    std::string node_name;
  };
  struct Entry {
    std::shared_ptr<BlockNode> node;
    std::vector<Child> children;
    bool monitor_owned = false;
    uint32_t users = 0;  // exports serving the node (Retain/Release)

    // The child in `role`, or nullptr.
    const Child* FindChild(std::string_view role) const;
  };

  // Opens the node the options describe, owned by the monitor: first its children (a node name
  // refers to an open node, inline options open a new one), then the node itself with them. On
  // failure nothing stays open.
  absl::Status Add(const BlockdevOptions& options);
  // QEMU's blockdev-del, less its check for exports (the caller's): refused with QEMU's errors
  // while another node refers to the node or it is not the monitor's; then the node closes, and
  // so do the inline children no other node refers to.
  absl::Status Delete(std::string_view node_name);

  const Entry* Find(std::string_view node_name) const;
  // An export starts or stops serving the node; a node the monitor does not own stays open
  // while one does.
  void Retain(std::string_view node_name);
  void Release(std::string_view node_name);

  // In the order they were opened (children before their parents).
  const std::list<Entry>& entries() const { return entries_; }

 private:
  // Opens `options` and its children; each node it adds is appended to `opened` too, so a
  // failure can close them again.
  absl::StatusOr<std::string> Open(const BlockdevOptions& options, bool monitor_owned,
                                   std::vector<std::string>* opened);
  // Resolves or opens the child `role` names and adds the edge to `children`.
  absl::StatusOr<std::shared_ptr<BlockNode>> OpenChild(const ChildRef& ref, const std::string& role,
                                                       std::vector<Child>* children,
                                                       std::vector<std::string>* opened);
  std::string AutoName();
  bool HasParent(std::string_view node_name) const;
  void Erase(std::string_view node_name);
  // Closes every node the monitor does not own that neither a node nor an export uses.
  void CloseUnused();

  std::list<Entry> entries_;
  uint64_t auto_names_ = 0;
};

}  // namespace bexd::block
