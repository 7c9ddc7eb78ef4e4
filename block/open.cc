#include "block/open.h"

#include <type_traits>
#include <variant>

#include "block/file_node.h"
#include "block/null_node.h"
#include "block/qcow2/node.h"

namespace bexd::block {

absl::StatusOr<std::shared_ptr<BlockNode>> OpenBlockNode(const BlockdevOptions& options) {
  if (options.node_name.empty()) {
    return absl::InvalidArgumentError("a block node needs a node-name");
  }
  return std::visit(
      [&](const auto& driver) -> absl::StatusOr<std::shared_ptr<BlockNode>> {
        using Driver = std::decay_t<decltype(driver)>;
        if constexpr (std::is_same_v<Driver, NullOptions>) {
          return OpenNullNode(options.node_name, driver, options.read_only);
        } else {
          auto node = FileNode::Open(options.node_name, driver, options.read_only);
          if (!node.ok()) return node.status();
          return std::shared_ptr<BlockNode>(std::move(*node));
        }
      },
      options.driver);
}

absl::StatusOr<std::shared_ptr<BlockNode>> OpenQcow2Node(const std::string& node_name,
                                                         const Qcow2Options& options,
                                                         bool read_only,
                                                         std::shared_ptr<BlockNode> file,
                                                         std::shared_ptr<BlockNode> backing) {
  auto node =
      qcow2::Qcow2Node::Open(node_name, options, read_only, std::move(file), std::move(backing));
  if (!node.ok()) return node.status();
  return std::shared_ptr<BlockNode>(std::move(*node));
}

}  // namespace bexd::block
