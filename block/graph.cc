// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/graph.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <random>

#include "block/open.h"
#include "util/log.h"
#include "util/status.h"

namespace bexd::block {

const BlockGraph::Child* BlockGraph::Entry::FindChild(std::string_view role) const {
  for (const Child& child : children) {
    if (child.role == role) return &child;
  }
  return nullptr;
}

const BlockGraph::Entry* BlockGraph::Find(std::string_view node_name) const {
  for (const Entry& entry : entries_) {
    if (entry.node->node_name() == node_name) return &entry;
  }
  return nullptr;
}

// QEMU's form: "#block", a counter, two random digits (so nobody relies on a generated name).
// A user's node-name starts with a letter, so these never collide with one.
std::string BlockGraph::AutoName() {
  static thread_local std::minstd_rand random(std::random_device{}());
  return fmt::format("#block{}{:02}", auto_names_++, random() % 100);
}

absl::Status BlockGraph::Add(const BlockdevOptions& options) {
  std::vector<std::string> opened;
  absl::StatusOr<std::string> name = Open(options, /*monitor_owned=*/true, &opened);
  if (name.ok()) return absl::OkStatus();
  for (auto it = opened.rbegin(); it != opened.rend(); ++it) Erase(*it);
  return name.status();
}

absl::StatusOr<std::string> BlockGraph::Open(const BlockdevOptions& options, bool monitor_owned,
                                             std::vector<std::string>* opened) {
  // QEMU's error. Checked before any child opens, and again below for a clash between a node
  // and a child defined inline under it.
  auto duplicate = [](const std::string& name) {
    return absl::InvalidArgumentError(fmt::format("Duplicate nodes with node-name='{}'", name));
  };
  if (!options.node_name.empty() && Find(options.node_name) != nullptr) {
    return duplicate(options.node_name);
  }
  BlockdevOptions named = options;
  if (named.node_name.empty()) named.node_name = AutoName();
  std::vector<Child> children;
  NodeChildren open_children;
  if (options.file) {
    absl::StatusOr<std::shared_ptr<BlockNode>> file =
        OpenChild(named, *options.file, "file", &children, opened);
    if (!file.ok()) return file.status();
    open_children.file = *std::move(file);
  }
  if (options.backing) {
    if (options.backing->kind != ChildRef::Kind::kNull) {
      absl::StatusOr<std::shared_ptr<BlockNode>> backing =
          OpenChild(named, *options.backing, "backing", &children, opened);
      if (!backing.ok()) return backing.status();
      open_children.backing = *std::move(backing);
    }
  } else if (open_children.file != nullptr) {
    absl::StatusOr<std::optional<BlockdevOptions>> from_image =
        ImageBackingOptions(options, open_children.file);
    if (!from_image.ok()) return from_image.status();
    if (*from_image) {
      const std::string backing_file =
          std::get<FileOptions>((*from_image)->file->options->driver).filename;
      absl::Status loop = EnterImageChain(open_children.file->filename(), backing_file);
      if (!loop.ok()) {
        return util::AnnotateStatus(fmt::format("node '{}'", named.node_name), loop);
      }
      ChildRef ref{.kind = ChildRef::Kind::kInline,
                   .options = std::make_shared<BlockdevOptions>(**std::move(from_image))};
      absl::StatusOr<std::shared_ptr<BlockNode>> backing =
          OpenChild(named, ref, "backing", &children, opened);
      image_chain_.pop_back();
      if (!backing.ok()) {
        // QEMU's words first: the inner error names an automatic node the user never gave.
        return util::AnnotateStatus(fmt::format("node '{}': Could not open backing file '{}'",
                                                named.node_name, backing_file),
                                    backing.status());
      }
      open_children.backing = *std::move(backing);
    }
  }

  if (Find(named.node_name) != nullptr) return duplicate(named.node_name);
  // A writable format node writes through its file child (and locks its image for writing);
  // the backing child is only ever read.
  if (!named.read_only && named.auto_read_only && open_children.file != nullptr &&
      open_children.file->read_only()) {
    named.read_only = true;  // its file child fell back to read-only
  }
  if (!named.read_only && open_children.file != nullptr && open_children.file->read_only()) {
    return absl::InvalidArgumentError(fmt::format(
        "node '{}': its file child '{}' is read-only, so the node cannot be writable (give it "
        "read-only=on, or a writable file child)",
        named.node_name, open_children.file->node_name()));
  }
  absl::StatusOr<std::shared_ptr<BlockNode>> node = OpenBlockNode(named, open_children);
  if (!node.ok()) return node.status();
  log::Debug("opened node '{}': {}", named.node_name, (*node)->description());
  entries_.push_back(Entry{
      .node = *std::move(node), .children = std::move(children), .monitor_owned = monitor_owned});
  opened->push_back(named.node_name);
  return named.node_name;
}

absl::Status BlockGraph::EnterImageChain(const std::string& image, const std::string& backing) {
  auto identity = [](const std::string& path) -> std::pair<dev_t, ino_t> {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return {0, 0};  // the open then says why
    return {st.st_dev, st.st_ino};
  };
  image_chain_.push_back(identity(image));
  const std::pair<dev_t, ino_t> next = identity(backing);
  if (next != std::pair<dev_t, ino_t>{0, 0} &&
      std::find(image_chain_.begin(), image_chain_.end(), next) != image_chain_.end()) {
    image_chain_.pop_back();
    return absl::InvalidArgumentError(fmt::format(
        "backing file '{}' is already in the backing chain above it: the images' backing files "
        "form a loop",
        backing));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<BlockNode>> BlockGraph::OpenChild(const BlockdevOptions& parent,
                                                                 const ChildRef& ref,
                                                                 const std::string& role,
                                                                 std::vector<Child>* children,
                                                                 std::vector<std::string>* opened) {
  std::string name;
  if (ref.kind == ChildRef::Kind::kInline) {
    absl::StatusOr<std::string> opened_name = Open(*ref.options, /*monitor_owned=*/false, opened);
    if (!opened_name.ok()) return opened_name.status();
    name = *std::move(opened_name);
  } else if (Find(ref.node_name) != nullptr) {
    name = ref.node_name;
  } else {
    // QEMU's error (bdrv_lookup_bs).
    return absl::InvalidArgumentError(
        fmt::format("Cannot find device='{}' nor node-name='{}'", ref.node_name, ref.node_name));
  }
  // Before the parent reads anything through the child (a qcow2 header for its backing file).
  const ChildPermissions permissions = PermissionsFor(parent, role);
  absl::Status allowed = CheckNewUse(name, Use{.taken = permissions.taken,
                                               .unshared = permissions.unshared,
                                               .user = fmt::format("node '{}'", parent.node_name),
                                               .role = role,
                                               .parent_node = parent.node_name});
  if (!allowed.ok()) return allowed;
  children->push_back(Child{.role = role, .node_name = name, .permissions = permissions});
  return Find(name)->node;
}

bool BlockGraph::HasParent(std::string_view node_name) const {
  for (const Entry& entry : entries_) {
    for (const Child& child : entry.children) {
      if (child.node_name == node_name) return true;
    }
  }
  return false;
}

absl::Status BlockGraph::Delete(std::string_view node_name) {
  const Entry* entry = Find(node_name);
  if (entry == nullptr) {
    return absl::NotFoundError(fmt::format("Failed to find node with node-name='{}'", node_name));
  }
  // QEMU's checks and errors, in its order: a backing child is blocked by its parent; a node
  // opened inline belongs to its parent; any other parent holds a reference.
  for (const Entry& parent : entries_) {
    const Child* backing = parent.FindChild("backing");
    if (backing != nullptr && backing->node_name == node_name) {
      return absl::FailedPreconditionError(
          fmt::format("Node '{}' is busy: node is used as backing hd of '{}'", node_name,
                      parent.node->node_name()));
    }
  }
  if (!entry->monitor_owned) {
    return absl::FailedPreconditionError(
        fmt::format("Node {} is not owned by the monitor", node_name));
  }
  if (HasParent(node_name)) {
    return absl::FailedPreconditionError(fmt::format("Block device {} is in use", node_name));
  }
  Erase(node_name);
  log::Info("closed node '{}'", node_name);
  CloseUnused();
  return absl::OkStatus();
}

void BlockGraph::Retain(std::string_view node_name, std::string_view id, bool writable) {
  for (Entry& entry : entries_) {
    if (entry.node->node_name() == node_name) {
      entry.exporters.push_back(Exporter{.id = std::string(id), .writable = writable});
    }
  }
}

void BlockGraph::Release(std::string_view node_name, std::string_view id) {
  for (Entry& entry : entries_) {
    if (entry.node->node_name() != node_name) continue;
    std::erase_if(entry.exporters, [&](const Exporter& exporter) { return exporter.id == id; });
  }
  CloseUnused();
}

void BlockGraph::Erase(std::string_view node_name) {
  entries_.remove_if([&](const Entry& entry) { return entry.node->node_name() == node_name; });
}

void BlockGraph::CloseUnused() {
  // Closing a parent can leave its own inline children unused: repeat until nothing changes.
  for (bool closed = true; closed;) {
    closed = false;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      const std::string& name = it->node->node_name();
      if (it->monitor_owned || !it->exporters.empty() || HasParent(name)) continue;
      log::Info("closed node '{}' (its last parent went)", name);
      entries_.erase(it);
      closed = true;
      break;
    }
  }
}

}  // namespace bexd::block
