// SPDX-License-Identifier: GPL-2.0-or-later
// One export's FUSE session, shared by all of its queue threads: the block node, the options, the
// negotiated INIT state, the presented attributes, and the open file handle count. The fields the
// READ/WRITE path reads are written only at creation and INIT; the rest sit behind a mutex or on
// their own cache line so the I/O path takes no lock.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <linux/fuse.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "block/block_node.h"
#include "fuse/passthrough.h"

namespace bexd::fuse {

struct SessionOptions {
  bool writable = false;
  // The node's size follows what is written: WRITE past the end grows it instead of failing with
  // ENOSPC, and an open with O_TRUNC empties it. Without it an O_TRUNC open keeps the size and
  // the data (`cp` into a disk image overwrites it instead of destroying it, as QSD does).
  bool growable = false;
  // Explicit size changes (SETATTR size, FALLOCATE past the end) need `growable` too, not just
  // `writable`. For virtio-fs, whose client is an untrusted guest: writing a disk image must not
  // let it set the host's file to any size it likes. Off (FUSE exports): a writable export may be
  // resized explicitly, as QSD allows.
  bool resize_needs_growable = false;
  // Every WRITE is durable when answered (block kIoFua).
  bool writethrough = false;
  // virtio-fs: node 1 is a directory holding one regular file, `file_name`, as node 2. Otherwise
  // node 1 is the file itself (a FUSE file system mounted on a regular file).
  bool directory_root = false;
  std::string file_name;
  // Presented owner, permission bits (0: 0600 if writable, else 0400) and initial timestamps
  // (unset: the session's creation time). SETATTR may change them for the session's lifetime.
  uint32_t uid = ::getuid();
  uint32_t gid = ::getgid();
  uint32_t file_mode = 0;
  std::optional<struct timespec> timestamp;
  // Largest READ/WRITE payload; a multiple of 4096 in [4096, 1 MiB].
  uint32_t max_write = uint32_t{1} << 20;
};

enum class NodeKind { kNone, kDirectory, kFile };

inline constexpr uint64_t kRootNodeId = FUSE_ROOT_ID;
inline constexpr uint64_t kFileInDirectoryNodeId = 2;

struct NodeAttributes {
  uint32_t mode = 0;  // file type and permission bits
  uint32_t uid = 0;
  uint32_t gid = 0;
  struct timespec atime = {}, mtime = {}, ctime = {};
};

class Session {
 public:
  // Fails if the options contradict the node (writable on a read-only node, growable on one that
  // cannot be resized) or themselves.
  static absl::StatusOr<std::shared_ptr<Session>> Create(std::shared_ptr<block::BlockNode> node,
                                                         SessionOptions options);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  block::BlockNode& node() const { return *node_; }
  // The node's, read once at creation (they are fixed while it is open).
  const block::Capabilities& capabilities() const { return capabilities_; }
  const SessionOptions& options() const { return options_; }
  uint64_t file_node_id() const { return file_node_id_; }
  NodeKind KindOf(uint64_t node_id) const;

  // Buffer sizes a transport needs: the largest request the kernel sends (a WRITE of max_write
  // bytes, never less than FUSE_MIN_READ_BUFFER) and the largest reply (a READ of max_write).
  size_t max_request_bytes() const;
  size_t max_reply_bytes() const;

  // INIT state. A new INIT (a virtio-fs guest that rebooted) starts a fresh session: handles from
  // before it are gone.
  bool initialized() const { return initialized_.load(std::memory_order_acquire); }
  uint32_t protocol_minor() const { return protocol_minor_.load(std::memory_order_relaxed); }
  // `io_uring`: INIT accepted FUSE over io_uring.
  void MarkInitialized(uint32_t protocol_minor, bool io_uring);
  // From then on INIT accepts FUSE over io_uring when the kernel offers it. Only for an export
  // that will register io_uring rings on every kernel queue (export/fuse_uring/): once INIT
  // accepts it, the kernel holds new requests back until every queue has one. Call before any
  // request is served.
  void EnableIoUring() { io_uring_enabled_.store(true, std::memory_order_relaxed); }
  bool io_uring_enabled() const { return io_uring_enabled_.load(std::memory_order_relaxed); }
  // Whether the last INIT accepted FUSE over io_uring; valid once initialized().
  bool io_uring() const { return io_uring_.load(std::memory_order_relaxed); }
  void MarkDestroyed();

  // Open file handles (not directory handles): an export is in use while this is non-zero.
  uint32_t open_handles() const { return open_handles_.load(std::memory_order_relaxed); }
  void HandleOpened();
  void HandleReleased();

  // Whether the options let a client change the size explicitly (SETATTR size, FALLOCATE past
  // the end), and whether the node can.
  bool resize_allowed() const {
    return options_.writable && (options_.growable || !options_.resize_needs_growable);
  }
  bool resizable() const { return resize_allowed() && capabilities_.resize; }

  NodeAttributes Attributes(NodeKind kind) const;
  // False if SETATTR's timestamps are out of range (nanoseconds >= 10^9).
  static bool ValidTimes(const struct fuse_setattr_in& in);
  // Applies SETATTR's mode, owner and timestamp changes (not the size) to the node; 0, or EINVAL
  // (and no change) unless ValidTimes(in).
  int ApplyAttributes(NodeKind kind, const struct fuse_setattr_in& in);

  // Only the mounting user can reach the file (a FUSE mount without allow_other: the kernel
  // turns everyone else away). SETATTR then refuses permission bits for the group and others,
  // which would only pretend to grant access (QSD answers EPERM too). Call before any request
  // is served.
  void RestrictToOwner() { owner_only_.store(true, std::memory_order_relaxed); }
  bool owner_only() const { return owner_only_.load(std::memory_order_relaxed); }

  // FUSE passthrough, if the export may use it: set once, before the first request arrives.
  void SetPassthrough(std::unique_ptr<Passthrough> passthrough) {
    passthrough_ = std::move(passthrough);
  }
  Passthrough* passthrough() const { return passthrough_.get(); }
  // The node's size as clients see it. A passthrough write past the end of a growable export
  // grows the host file without telling bexd, so while passthrough has been used the size is
  // re-read first. Not for the READ/WRITE path.
  uint64_t CurrentSize() const;

  // Size changes, serialized between queue threads. They may block (ftruncate).
  absl::Status GrowTo(uint64_t end);  // no-op if the node is already at least that big
  absl::Status Resize(uint64_t size);

 private:
  Session(std::shared_ptr<block::BlockNode> node, SessionOptions options);

  // Read-mostly.
  const std::shared_ptr<block::BlockNode> node_;
  const block::Capabilities capabilities_;
  const SessionOptions options_;
  const uint64_t file_node_id_;
  std::atomic<bool> initialized_{false};
  std::atomic<uint32_t> protocol_minor_{0};
  std::unique_ptr<Passthrough> passthrough_;
  std::atomic<bool> io_uring_enabled_{false};
  std::atomic<bool> io_uring_{false};
  std::atomic<bool> owner_only_{false};

  alignas(64) std::atomic<uint32_t> open_handles_{0};

  alignas(64) mutable std::mutex attributes_mutex_;
  NodeAttributes file_attributes_;
  NodeAttributes directory_attributes_;
};

}  // namespace bexd::fuse
