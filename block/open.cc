// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/open.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

#include "block/file_node.h"
#include "block/nbd/nbd_node.h"
#include "block/null_node.h"
#include "block/qcow2/backing_name.h"
#include "block/qcow2/node.h"
#include "block/raw_node.h"
#include "block/rbd/rbd_node.h"

namespace bexd::block {
namespace {

// The backing file a format image names in its header, resolved as QEMU resolves it.
struct ImageBackingFile {
  std::string filename;  // a relative name in the header is taken from the image's directory
  std::string format;    // the header's backing format, or what the driver probed: qcow2, raw
};

absl::StatusOr<std::shared_ptr<BlockNode>> OpenQcow2Node(const std::string& node_name,
                                                         const Qcow2Options& options,
                                                         bool read_only,
                                                         std::shared_ptr<BlockNode> file,
                                                         std::shared_ptr<BlockNode> backing) {
  auto node =
      qcow2::Qcow2Node::Open(node_name, options, read_only, std::move(file), std::move(backing));
  if (!node.ok()) return node.status();
  return std::shared_ptr<BlockNode>(*std::move(node));
}

// QEMU probes a backing file whose format the header does not name; of the formats bexd knows,
// only qcow2 has a magic, and anything else is raw.
absl::StatusOr<std::string> ProbeImageFormat(const std::string& node_name,
                                             const std::string& filename) {
  const int fd = open(filename.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(fmt::format("node '{}': cannot open backing file '{}': {}",
                                           node_name, filename, std::strerror(errno)));
  }
  std::array<char, 4> magic{};
  const ssize_t got = pread(fd, magic.data(), magic.size(), 0);
  close(fd);
  constexpr std::array<char, 4> kQcow2Magic = {'Q', 'F', 'I', '\xfb'};
  return got == static_cast<ssize_t>(magic.size()) && magic == kQcow2Magic ? "qcow2" : "raw";
}

absl::StatusOr<std::optional<ImageBackingFile>> Qcow2BackingFile(const std::string& node_name,
                                                                 BlockNode& file) {
  absl::StatusOr<qcow2::Qcow2ImageInfo> info = qcow2::ReadQcow2ImageInfo(node_name, file);
  if (!info.ok()) return info.status();
  if (info->backing_file.empty()) return std::nullopt;
  absl::StatusOr<std::string> filename =
      qcow2::ResolveBackingFileName(file.filename(), info->backing_file);
  if (!filename.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("node '{}': {} (give the backing node with backing=NODE, or backing=null)",
                    node_name, std::string(filename.status().message())));
  }
  std::string format = info->backing_format;
  if (format.empty()) {
    absl::StatusOr<std::string> probed = ProbeImageFormat(node_name, *filename);
    if (!probed.ok()) return probed.status();
    format = *std::move(probed);
  }
  return ImageBackingFile{.filename = *std::move(filename), .format = std::move(format)};
}

absl::Status MissingFileChild(const std::string& node_name, std::string_view driver) {
  return absl::InvalidArgumentError(
      fmt::format("node '{}': the {} driver needs a file child", node_name, driver));
}

}  // namespace

absl::StatusOr<std::shared_ptr<BlockNode>> OpenBlockNode(const BlockdevOptions& options,
                                                         const NodeChildren& children) {
  const std::string& name = options.node_name;
  if (name.empty()) return absl::InvalidArgumentError("a block node needs a node-name");
  absl::StatusOr<std::shared_ptr<BlockNode>> node = std::visit(
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
  if (node.ok()) (*node)->SetDetectZeroes(options.detect_zeroes);
  return node;
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
