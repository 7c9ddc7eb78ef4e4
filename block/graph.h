// SPDX-License-Identifier: GPL-2.0-or-later
// The block graph: every open node by name, the edges from format nodes to their children, and
// who uses each node. Nodes come from --blockdev and blockdev-add (owned by the monitor, as QEMU
// says) or are defined inline in a parent's options (owned by that parent: named automatically
// when they have no node-name, and closed with the last parent that refers to them). Main thread
// only.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <sys/types.h>

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "block/block_node.h"
#include "block/options.h"

namespace bexd::block {

class BlockGraph {
 public:
  // QEMU's permissions that users of one node can take and refuse to share with each other
  // (BLK_PERM_WRITE, BLK_PERM_RESIZE; every user may read).
  enum Permission : uint8_t { kWrite = 1, kResize = 2 };
  // What a parent takes on its child and refuses to share, as QEMU's drivers do: a qcow2 node
  // writes its file child's metadata whenever it is writable, and nobody else may write or resize
  // it; a raw node passes on what its own users take (and with offset or size, refuses resize).
  struct ChildPermissions {
    uint8_t taken = 0;
    uint8_t unshared = 0;
    bool pass_taken = false;     // also take what the parent's users take
    bool pass_unshared = false;  // also refuse what the parent's users refuse
  };
  // An edge from a parent to a child node.
  struct Child {
    std::string role;  // "file" or "backing"
    std::string node_name;
    ChildPermissions permissions;
  };
  // An export serving a node.
  struct Exporter {
    std::string id;
    bool writable = false;  // takes write and resize
  };
  struct Entry {
    std::shared_ptr<BlockNode> node;
    std::vector<Child> children;
    bool monitor_owned = false;
    std::vector<Exporter> exporters;  // Retain/Release

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
  // Whether export `id` may serve the node (writable: taking write and resize) beside the node's
  // other users; refused with QEMU's permission conflict error.
  absl::Status CheckExport(std::string_view node_name, std::string_view id, bool writable) const;
  // Whether block_resize may change the node's size: refused with QEMU's permission conflict
  // error while a user (a qcow2 parent, a raw window) relies on it keeping its size.
  absl::Status CheckResize(std::string_view node_name) const;
  // An export starts or stops serving the node; a node the monitor does not own stays open
  // while one does.
  void Retain(std::string_view node_name, std::string_view id, bool writable);
  void Release(std::string_view node_name, std::string_view id);

  // In the order they were opened (children before their parents).
  const std::list<Entry>& entries() const { return entries_; }

 private:
  // Opens `options` and its children; each node it adds is appended to `opened` too, so a
  // failure can close them again.
  absl::StatusOr<std::string> Open(const BlockdevOptions& options, bool monitor_owned,
                                   std::vector<std::string>* opened);
  // Resolves or opens the child `role` names and, if the child allows what `parent` takes on it
  // and refuses to share, adds the edge to `children`.
  absl::StatusOr<std::shared_ptr<BlockNode>> OpenChild(const BlockdevOptions& parent,
                                                       const ChildRef& ref, const std::string& role,
                                                       std::vector<Child>* children,
                                                       std::vector<std::string>* opened);
  std::string AutoName();
  // Notes `image` as being opened with its backing chain from the headers, and refuses a
  // `backing` file that is already in that chain (an image naming itself, a -> b -> a), which
  // would open forever. On success the caller pops image_chain_ once the backing child is open.
  absl::Status EnterImageChain(const std::string& image, const std::string& backing);

  // graph_permissions.cc. One user of a node: a parent's edge or an export.
  struct Use {
    uint8_t taken = 0;
    uint8_t unshared = 0;
    std::string user;         // "node 'fmt0'", "export 'e0'"
    std::string role;         // "file", "backing", "root" (an export)
    std::string parent_node;  // the edge's parent; empty for an export
  };
  static ChildPermissions PermissionsFor(const BlockdevOptions& parent, std::string_view role);
  std::vector<Use> UsesOf(std::string_view node_name) const;
  uint8_t Taken(std::string_view node_name) const;
  uint8_t Unshared(std::string_view node_name) const;
  // Whether `use` can join the node's other users (the parent's old edge, if any, is replaced),
  // and what it changes below the node through children that pass permissions on.
  absl::Status CheckNewUse(std::string_view node_name, const Use& use) const;

  bool HasParent(std::string_view node_name) const;
  void Erase(std::string_view node_name);
  // Closes every node the monitor does not own that neither a node nor an export uses.
  void CloseUnused();

  std::list<Entry> entries_;
  uint64_t auto_names_ = 0;
  // The images whose backing chains are being opened from their headers, outermost first.
  std::vector<std::pair<dev_t, ino_t>> image_chain_;
};

}  // namespace bexd::block
