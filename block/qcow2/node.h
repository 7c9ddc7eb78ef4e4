// SPDX-License-Identifier: GPL-2.0-or-later
// The `qcow2` driver's node: a qcow2 image on a `file` child node, with an optional read-only
// backing node, both opened by the caller. Reads and writes of allocated clusters run on the
// calling queue thread without a lock (queue.h); metadata changes run on the node's metadata
// thread (engine.h).
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "block/block_node.h"
#include "block/options.h"

namespace bexd::block::qcow2 {

struct ImageState;
class Engine;

// What a qcow2 header says about an image, read without opening it (to find its backing file).
struct Qcow2ImageInfo {
  uint32_t version = 3;
  uint64_t virtual_size = 0;
  uint64_t cluster_size = 0;
  std::string backing_file;    // as stored in the image; empty: none
  std::string backing_format;  // from the backing format extension; may be empty
  // What query-named-block-nodes shows in format-specific, as QEMU.
  uint32_t refcount_bits = 16;
  bool extended_l2 = false;
  bool lazy_refcounts = false;   // the header's compatible feature bit
  std::string compression_type;  // "zlib" or "zstd"
};

// Reads and validates the header on `file`, for the qcow2 node `node_name` about to open over it.
// Errors name that node, the file and the problem.
absl::StatusOr<Qcow2ImageInfo> ReadQcow2ImageInfo(const std::string& node_name, BlockNode& file);

class Qcow2Node final : public BlockNode, public std::enable_shared_from_this<Qcow2Node> {
 public:
  // Opens the image on `file`. `backing` (may be null) provides the clusters the image does not
  // allocate; without it they read as zeroes. A writable open repairs the refcounts of an image
  // left dirty (lazy refcounts) and clears autoclear feature bits bexd does not maintain.
  static absl::StatusOr<std::shared_ptr<Qcow2Node>> Open(std::string node_name,
                                                         const Qcow2Options& options,
                                                         bool read_only,
                                                         std::shared_ptr<BlockNode> file,
                                                         std::shared_ptr<BlockNode> backing);
  // Close()s the image if that has not happened, logging an error.
  ~Qcow2Node() override;

  std::string driver_name() const override { return "qcow2"; }
  uint64_t size() const override;
  bool read_only() const override;
  uint32_t request_alignment() const override;
  Capabilities capabilities() const override;
  absl::Status Truncate(uint64_t new_size) override;
  std::string description() const override;
  std::string filename() const override { return file()->filename(); }
  // The file child's: data, metadata and clusters not yet trimmed away.
  std::optional<uint64_t> AllocatedBytes() const override { return file()->AllocatedBytes(); }

  // Writes every cached change back, drops the clusters freed meanwhile and marks the image clean.
  // Fails with FailedPrecondition while queues exist; the node serves nothing afterwards.
  absl::Status Close();

  const Qcow2ImageInfo& info() const { return info_; }
  const std::shared_ptr<BlockNode>& file() const;
  const std::shared_ptr<BlockNode>& backing() const;
  // A damaged structure was found; writes fail with -EIO.
  bool corrupt() const;
  // The header's dirty bit is set: the refcounts need a repair if bexd stops without Close().
  bool dirty() const;

 protected:
  absl::StatusOr<std::unique_ptr<IoQueue>> CreateDriverQueue() override;

 private:
  Qcow2Node(std::string node_name, Qcow2ImageInfo info);

  Qcow2ImageInfo info_;
  std::unique_ptr<ImageState> image_;
  std::unique_ptr<Engine> engine_;
  bool closed_ = false;
};

}  // namespace bexd::block::qcow2
