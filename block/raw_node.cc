// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/raw_node.h"

#include <fmt/format.h>

#include <algorithm>

#include "block/raw_queue.h"
#include "util/log.h"

namespace bexd::block {

absl::StatusOr<std::shared_ptr<RawNode>> RawNode::Open(std::string node_name,
                                                       const RawOptions& options, bool read_only,
                                                       std::shared_ptr<BlockNode> file) {
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("node '{}': the raw driver needs a file child", node_name));
  }
  std::shared_ptr<RawNode> node(
      new RawNode(std::move(node_name), options, read_only, std::move(file)));
  absl::Status status = node->CheckAgainstChild();
  if (!status.ok()) return status;
  return node;
}

absl::Status RawNode::CheckAgainstChild() const {
  const uint64_t child_size = file_->size();
  const std::string& child = file_->node_name();
  if (options_.offset > child_size) {
    return absl::InvalidArgumentError(
        fmt::format("node '{}': offset {} is past the end of its file child '{}' ({} bytes)",
                    node_name(), options_.offset, child, child_size));
  }
  if (options_.size && *options_.size > child_size - options_.offset) {
    return absl::InvalidArgumentError(fmt::format(
        "node '{}': offset {} plus size {} is past the end of its file child '{}' ({} bytes)",
        node_name(), options_.offset, *options_.size, child, child_size));
  }
  // Any window works, as in QEMU (a partition at sector 63 of a disk with 4 KiB sectors): the
  // child serves requests that break its alignment on its slow path (a bounce buffer, whole
  // blocks). Said once, since then every request through the node takes it.
  const uint32_t alignment = file_->request_alignment();
  if (options_.offset % alignment != 0 || (options_.size && *options_.size % alignment != 0)) {
    log::Info(
        "node '{}': offset {} or size {} is not a multiple of {}, the request alignment of its "
        "file child '{}': requests through it are bounced through whole blocks there",
        node_name(), options_.offset, options_.size.value_or(size()), alignment, child);
  }
  return absl::OkStatus();
}

uint32_t RawNode::request_alignment() const {
  const uint32_t alignment = file_->request_alignment();
  return options_.offset % alignment == 0 ? alignment : 1;
}

std::optional<HostFile> RawNode::host_file() const {
  if (options_.offset != 0 || options_.size.has_value()) return std::nullopt;
  return file_->host_file();
}

uint64_t RawNode::size() const {
  const uint64_t child_size = file_->size();
  if (child_size <= options_.offset) return 0;
  const uint64_t rest = child_size - options_.offset;
  return options_.size ? std::min(*options_.size, rest) : rest;
}

Capabilities RawNode::capabilities() const {
  Capabilities capabilities = file_->capabilities();
  capabilities.discard = capabilities.discard && options_.discard == DiscardMode::kUnmap;
  capabilities.resize = capabilities.resize && !options_.size && !read_only();
  return capabilities;
}

absl::Status RawNode::Truncate(uint64_t new_size) {
  if (read_only()) {
    return absl::PermissionDeniedError(
        fmt::format("node '{}': cannot resize: the node is read-only", node_name()));
  }
  if (options_.size) {
    return absl::PermissionDeniedError(
        fmt::format("node '{}': cannot resize: its size is fixed (size={} was given)", node_name(),
                    *options_.size));
  }
  if (new_size > UINT64_MAX - options_.offset) {
    return absl::OutOfRangeError(fmt::format("node '{}': size {} is too large for offset {}",
                                             node_name(), new_size, options_.offset));
  }
  return file_->Truncate(options_.offset + new_size);
}

absl::StatusOr<std::unique_ptr<IoQueue>> RawNode::CreateDriverQueue() {
  absl::StatusOr<std::unique_ptr<IoQueue>> child = file_->CreateQueue();
  if (!child.ok()) return child.status();
  return std::unique_ptr<IoQueue>(new RawQueue(shared_from_this(), *std::move(child)));
}

std::string RawNode::description() const {
  return fmt::format("raw (offset {}, size {}) of node '{}'", options_.offset,
                     options_.size ? fmt::format("{}", *options_.size) : "to its end",
                     file_->node_name());
}

}  // namespace bexd::block
