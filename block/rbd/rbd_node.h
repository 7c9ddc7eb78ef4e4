// SPDX-License-Identifier: GPL-2.0-or-later
// QEMU's `rbd` protocol driver: an image (or a snapshot of one) in a Ceph cluster, through
// librbd. One cluster connection and one open image per node, shared by every queue thread;
// each thread's RbdQueue (rbd_queue.h) submits asynchronous librbd requests and gets their
// completions back from librbd's threads without a lock.
//
// Writable nodes take the image's exclusive lock at open and keep it until they close: the open
// is refused while another live client holds the lock (a second bexd, or a QEMU that is
// writing), and once bexd holds it, other clients' writes fail with EROFS
// (docs/remote-storage.md has the rule). Read-only nodes and snapshots take no lock.
#pragma once

#include <absl/status/statusor.h>
#include <rbd/librbd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "block/block_node.h"
#include "block/options.h"
#include "block/rbd/rados_connection.h"

namespace bexd::block {

class RbdNode final : public BlockNode, public std::enable_shared_from_this<RbdNode> {
 public:
  // Connects, opens the image (a snapshot: read-only only) and, for a writable node, takes the
  // exclusive lock. Errors name the node, the image and the reason.
  static absl::StatusOr<std::shared_ptr<RbdNode>> Open(std::string node_name,
                                                       const RbdOptions& options, bool read_only);
  // Closes the image (librbd waits for requests in flight and releases the lock), then the
  // connection.
  ~RbdNode() override;

  std::string driver_name() const override { return "rbd"; }
  // The image's size, also after another client resized it (`rbd resize` is carried out by the
  // lock owner, i.e. this node, on the other client's behalf).
  uint64_t size() const override { return size_.load(std::memory_order_relaxed); }
  bool read_only() const override { return read_only_; }
  // Discards free storage with discard=unmap; block status is all data (no fast-diff query);
  // FUA needs nothing (writes complete once the OSDs have them); snapshots cannot resize.
  Capabilities capabilities() const override;
  // rbd_resize; growing and shrinking both work (QEMU's block_resize, a growable export).
  absl::Status Truncate(uint64_t new_size) override;
  std::string description() const override;
  // QEMU's legacy form, without options: rbd:pool/[namespace/]image[@snapshot].
  std::string filename() const override;

  const RbdOptions& options() const { return options_; }
  rbd_image_t image() const { return image_; }

 protected:
  absl::StatusOr<std::unique_ptr<IoQueue>> CreateDriverQueue() override;

 private:
  RbdNode(std::string node_name, const RbdOptions& options, bool read_only)
      : BlockNode(std::move(node_name)), options_(options), read_only_(read_only) {}
  absl::Status OpenImage();
  absl::Status TakeExclusiveLock();
  // librbd's header-update callback, on a librbd thread (as rbd-nbd, it reads the size there).
  static void OnImageUpdate(void* arg);
  std::string ImageName() const;

  const RbdOptions options_;
  const bool read_only_;
  std::unique_ptr<RadosConnection> connection_;
  rbd_image_t image_ = nullptr;
  std::optional<uint64_t> update_watch_;
  std::atomic<uint64_t> size_{0};
};

}  // namespace bexd::block
