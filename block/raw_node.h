// SPDX-License-Identifier: GPL-2.0-or-later
// The `raw` format driver (QEMU's): the bytes [offset, offset+size) of its file child as a node
// of its own, e.g. one partition of a whole-disk image. Its queue (raw_queue.h) hands every
// request on to the child's queue of the same thread, shifted by `offset`.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "block/block_node.h"
#include "block/options.h"

namespace bexd::block {

class RawNode final : public BlockNode, public std::enable_shared_from_this<RawNode> {
 public:
  // Checks offset and size against the child: both within it and, when the child needs aligned
  // requests (O_DIRECT), multiples of its request alignment.
  static absl::StatusOr<std::shared_ptr<RawNode>> Open(std::string node_name,
                                                       const RawOptions& options, bool read_only,
                                                       std::shared_ptr<BlockNode> file);

  std::string driver_name() const override { return "raw"; }
  // The fixed size, or the child's size past the offset; never more than the child still has.
  uint64_t size() const override;
  // The graph refuses a writable node over a read-only child; this holds without the graph too.
  bool read_only() const override { return read_only_ || file_->read_only(); }
  // The child's, unless the offset breaks it (then no alignment here keeps the child's fast path).
  uint32_t request_alignment() const override;
  // The child's, less what this node's options take away: discard=ignore drops discards, and a
  // fixed size (or read-only) cannot change.
  Capabilities capabilities() const override;
  // Resizes the child to offset + new_size; refused when the options fixed the size.
  absl::Status Truncate(uint64_t new_size) override;
  std::string description() const override;
  std::string filename() const override { return file_->filename(); }
  // The whole child's, offset or not (as QEMU sums a format node's children).
  std::optional<uint64_t> AllocatedBytes() const override { return file_->AllocatedBytes(); }
  // The child's when this node is all of it (no offset, no fixed size).
  std::optional<HostFile> host_file() const override;
  void SharePageCache() override { file_->SharePageCache(); }
  void RefreshSize() override { file_->RefreshSize(); }

  uint64_t offset() const { return options_.offset; }
  DiscardMode discard() const { return options_.discard; }

 protected:
  absl::StatusOr<std::unique_ptr<IoQueue>> CreateDriverQueue() override;

 private:
  RawNode(std::string node_name, const RawOptions& options, bool read_only,
          std::shared_ptr<BlockNode> file)
      : BlockNode(std::move(node_name)),
        options_(options),
        read_only_(read_only),
        file_(std::move(file)) {}
  absl::Status CheckAgainstChild() const;

  const RawOptions options_;
  const bool read_only_;
  const std::shared_ptr<BlockNode> file_;
};

}  // namespace bexd::block
