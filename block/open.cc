#include "block/open.h"

#include <fmt/format.h>

#include <string>
#include <type_traits>
#include <variant>

#include "block/file_node.h"
#include "block/nbd/nbd_node.h"
#include "block/null_node.h"
#include "block/raw_node.h"
#include "block/rbd/rbd_node.h"

namespace bexd::block {
namespace {

// The backing file a format image names in its header, resolved as QEMU resolves it.
struct ImageBackingFile {
  std::string filename;  // absolute; a relative name is taken from the image's directory
  std::string format;    // the header's backing format, or what the driver probed: qcow2, raw
};

// ===================================== qcow2 hook =====================================
// The qcow2 driver (block/qcow2/) plugs into bexd here and nowhere else. When it lands, these
// two functions call it:
//   OpenQcow2Node:    its open function, given the open `file` child, the open `backing` child
//                     (nullptr: none) and the Qcow2Options parsed by cli/config/blockdev_schema.cc;
//                     it returns the node (errors name the node).
//   Qcow2BackingFile: its helper that reads the header of the image on `file` and returns the
//                     backing file name resolved against file->filename()'s directory, and
//                     the backing format, or nullopt when the image has no backing file.
// Everything else (option parsing, opening the children first, naming and closing them, the
// backing chain from the headers, locking, query-named-block-nodes) is done already.
absl::Status Qcow2NotBuilt(const std::string& node_name) {
  return absl::UnimplementedError(
      fmt::format("node '{}': the qcow2 driver is not built into this bexd yet", node_name));
}

absl::StatusOr<std::shared_ptr<BlockNode>> OpenQcow2Node(const std::string& node_name,
                                                         const Qcow2Options& options,
                                                         bool read_only,
                                                         std::shared_ptr<BlockNode> file,
                                                         std::shared_ptr<BlockNode> backing) {
  return Qcow2NotBuilt(node_name);
}

absl::StatusOr<std::optional<ImageBackingFile>> Qcow2BackingFile(const std::string& node_name,
                                                                 const BlockNode& file) {
  return Qcow2NotBuilt(node_name);
}
// =================================== end qcow2 hook ===================================

absl::Status MissingFileChild(const std::string& node_name, std::string_view driver) {
  return absl::InvalidArgumentError(
      fmt::format("node '{}': the {} driver needs a file child", node_name, driver));
}

}  // namespace

absl::StatusOr<std::shared_ptr<BlockNode>> OpenBlockNode(const BlockdevOptions& options,
                                                         const NodeChildren& children) {
  const std::string& name = options.node_name;
  if (name.empty()) return absl::InvalidArgumentError("a block node needs a node-name");
  return std::visit(
      [&](const auto& driver) -> absl::StatusOr<std::shared_ptr<BlockNode>> {
        using Driver = std::decay_t<decltype(driver)>;
        if constexpr (std::is_same_v<Driver, NullOptions>) {
          return OpenNullNode(name, driver, options.read_only);
        } else if constexpr (std::is_same_v<Driver, FileOptions>) {
          auto node = FileNode::Open(name, driver, options.read_only, options.auto_read_only);
          if (!node.ok()) return node.status();
          return std::shared_ptr<BlockNode>(*std::move(node));
        } else if constexpr (std::is_same_v<Driver, RawOptions>) {
          if (children.file == nullptr) return MissingFileChild(name, "raw");
          auto node = RawNode::Open(name, driver, options.read_only, children.file);
          if (!node.ok()) return node.status();
          return std::shared_ptr<BlockNode>(*std::move(node));
        } else if constexpr (std::is_same_v<Driver, RbdOptions>) {
          auto node = RbdNode::Open(name, driver, options.read_only);
          if (!node.ok()) return node.status();
          return std::shared_ptr<BlockNode>(*std::move(node));
        } else if constexpr (std::is_same_v<Driver, NbdOptions>) {
          auto node = NbdNode::Open(name, driver, options.read_only);
          if (!node.ok()) return node.status();
          return std::shared_ptr<BlockNode>(*std::move(node));
        } else {
          static_assert(std::is_same_v<Driver, Qcow2Options>);
          if (children.file == nullptr) return MissingFileChild(name, "qcow2");
          return OpenQcow2Node(name, driver, options.read_only, children.file, children.backing);
        }
      },
      options.driver);
}

absl::StatusOr<std::optional<BlockdevOptions>> ImageBackingOptions(
    const BlockdevOptions& options, const std::shared_ptr<BlockNode>& file) {
  if (!std::holds_alternative<Qcow2Options>(options.driver)) return std::nullopt;
  absl::StatusOr<std::optional<ImageBackingFile>> backing =
      Qcow2BackingFile(options.node_name, *file);
  if (!backing.ok()) return backing.status();
  if (!*backing) return std::nullopt;

  // QEMU opens the backing file read-only, with the cache mode of the image's own file.
  FileOptions protocol;
  if (const auto* image_file = dynamic_cast<const FileNode*>(file.get())) {
    protocol = image_file->options();
  }
  protocol.filename = (*backing)->filename;
  protocol.host_device = false;  // QEMU opens a backing file named in a header with `file`
  BlockdevOptions file_options;
  file_options.read_only = true;
  file_options.driver = protocol;

  BlockdevOptions format_options;
  format_options.read_only = true;
  if ((*backing)->format == "qcow2") {
    format_options.driver = Qcow2Options{};
  } else if ((*backing)->format == "raw") {
    format_options.driver = RawOptions{};
  } else {
    return absl::InvalidArgumentError(fmt::format(
        "node '{}': backing file '{}' has format '{}', which bexd does not support (raw, qcow2)",
        options.node_name, (*backing)->filename, (*backing)->format));
  }
  format_options.file = ChildRef{.kind = ChildRef::Kind::kInline,
                                 .options = std::make_shared<BlockdevOptions>(file_options)};
  return format_options;
}

}  // namespace bexd::block
