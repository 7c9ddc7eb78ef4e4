// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/rbd/rbd_node.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "block/rbd/rbd_api.h"
#include "block/rbd/rbd_queue.h"
#include "util/log.h"
#include "util/status.h"

namespace bexd::block {
namespace {

// The addresses of the clients that own the image's lock (none: empty).
absl::StatusOr<std::vector<std::string>> LockOwners(rbd_image_t image) {
  std::vector<char*> owners(4);
  for (;;) {
    size_t count = owners.size();
    rbd_lock_mode_t mode;
    int r = Rbd().rbd_lock_get_owners(image, &mode, owners.data(), &count);
    if (r == -ENOENT) return std::vector<std::string>();
    if (r == -ERANGE) {
      owners.resize(count);
      continue;
    }
    if (r < 0) return absl::ErrnoToStatus(-r, "cannot list the image's lock owners");
    std::vector<std::string> addresses(owners.begin(), owners.begin() + count);
    Rbd().rbd_lock_get_owners_cleanup(owners.data(), count);
    return addresses;
  }
}

// Whether a client at `address` watches the image, i.e. is alive.
absl::StatusOr<bool> IsWatching(rbd_image_t image, const std::string& address) {
  std::vector<rbd_image_watcher_t> watchers(8);
  for (;;) {
    size_t count = watchers.size();
    int r = Rbd().rbd_watchers_list(image, watchers.data(), &count);
    if (r == -ERANGE) {
      watchers.resize(count);
      continue;
    }
    if (r < 0) return absl::ErrnoToStatus(-r, "cannot list the image's watchers");
    bool found = false;
    for (size_t i = 0; i < count; ++i) found = found || address == watchers[i].addr;
    Rbd().rbd_watchers_list_cleanup(watchers.data(), count);
    return found;
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<RbdNode>> RbdNode::Open(std::string node_name,
                                                       const RbdOptions& options, bool read_only) {
  if (options.snapshot && !read_only) {
    return absl::InvalidArgumentError(
        fmt::format("node '{}': rbd snapshots are read-only (give read-only=on)", node_name));
  }
  if (absl::Status loaded = LoadRbdApi(); !loaded.ok()) {
    return util::AnnotateStatus(fmt::format("node '{}'", node_name), loaded);
  }
  std::shared_ptr<RbdNode> node(new RbdNode(std::move(node_name), options, read_only));
  absl::StatusOr<std::unique_ptr<RadosConnection>> connection =
      RadosConnection::Connect(node->node_name(), options);
  if (!connection.ok()) return connection.status();
  node->connection_ = *std::move(connection);
  absl::Status status = node->OpenImage();
  if (status.ok() && !read_only) status = node->TakeExclusiveLock();
  if (!status.ok()) return status;
  return node;
}

absl::Status RbdNode::OpenImage() {
  const char* snapshot = options_.snapshot ? options_.snapshot->c_str() : nullptr;
  int r = read_only_
              ? Rbd().rbd_open_read_only(connection_->ioctx(), options_.image.c_str(), &image_,
                                         snapshot)
              : Rbd().rbd_open(connection_->ioctx(), options_.image.c_str(), &image_, snapshot);
  if (r < 0) {
    image_ = nullptr;
    if (r == -ENOENT) {
      return absl::NotFoundError(
          options_.snapshot
              ? fmt::format("node '{}': image '{}' or its snapshot does not exist", node_name(),
                            ImageName())
              : fmt::format("node '{}': image '{}' does not exist", node_name(), ImageName()));
    }
    return absl::ErrnoToStatus(
        -r, fmt::format("node '{}': cannot open image '{}'", node_name(), ImageName()));
  }
  uint64_t size = 0;
  r = Rbd().rbd_get_size(image_, &size);
  if (r < 0) {
    return absl::ErrnoToStatus(
        -r, fmt::format("node '{}': cannot read the size of image '{}'", node_name(), ImageName()));
  }
  size_.store(size, std::memory_order_relaxed);
  uint64_t handle = 0;
  r = Rbd().rbd_update_watch(image_, &handle, &RbdNode::OnImageUpdate, this);
  if (r < 0) {
    return absl::ErrnoToStatus(-r, fmt::format("node '{}': cannot watch image '{}' for changes",
                                               node_name(), ImageName()));
  }
  update_watch_ = handle;
  return absl::OkStatus();
}

void RbdNode::OnImageUpdate(void* arg) {
  auto* node = static_cast<RbdNode*>(arg);
  uint64_t size = 0;
  if (Rbd().rbd_get_size(node->image_, &size) == 0)
    node->size_.store(size, std::memory_order_relaxed);
}

Capabilities RbdNode::capabilities() const {
  Capabilities capabilities;
  capabilities.discard = options_.discard == DiscardMode::kUnmap;
  capabilities.block_status = false;
  capabilities.flush = !read_only_ && !options_.cache_no_flush;
  capabilities.resize = !read_only_;
  return capabilities;
}

absl::Status RbdNode::TakeExclusiveLock() {
  auto failed = [&](const absl::Status& status) {
    return absl::Status(status.code(), fmt::format("node '{}': image '{}': {}", node_name(),
                                                   ImageName(), std::string(status.message())));
  };
  uint64_t features = 0;
  int r = Rbd().rbd_get_features(image_, &features);
  if (r < 0) return failed(absl::ErrnoToStatus(-r, "cannot read the image's features"));
  if (!(features & RBD_FEATURE_EXCLUSIVE_LOCK)) {
    log::Warn(
        "node '{}': image '{}' has no exclusive-lock feature, so nothing keeps other clients "
        "from writing to it at the same time (`rbd feature enable IMAGE exclusive-lock`)",
        node_name(), ImageName());
    return absl::OkStatus();
  }
  // librbd hands its lock over to whoever asks for it, unless it was taken explicitly: asking a
  // QEMU that is writing would take the image away from a running guest. So a live owner (one
  // that still watches the image) keeps it and this open is refused; a dead owner's lock is
  // broken by rbd_lock_acquire.
  absl::StatusOr<std::vector<std::string>> owners = LockOwners(image_);
  if (!owners.ok()) return failed(owners.status());
  for (const std::string& owner : *owners) {
    absl::StatusOr<bool> alive = IsWatching(image_, owner);
    if (!alive.ok()) return failed(alive.status());
    if (*alive) {
      return failed(absl::FailedPreconditionError(fmt::format(
          "locked for writing by another client ({}); open it with read-only=on, or stop that "
          "client (a client that died keeps its lock until the OSDs notice, about 30 s: "
          "osd_client_watch_timeout)",
          owner)));
    }
  }
  r = Rbd().rbd_lock_acquire(image_, RBD_LOCK_MODE_EXCLUSIVE);
  if (r == -EROFS) {
    return failed(absl::FailedPreconditionError(
        "locked for writing by another client that keeps its lock; open it with read-only=on, or "
        "stop that client"));
  }
  if (r < 0) return failed(absl::ErrnoToStatus(-r, "cannot take the exclusive lock"));
  if (!owners->empty()) {
    log::Warn("node '{}': image '{}': took over the lock of a client that is gone ({})",
              node_name(), ImageName(), owners->front());
  }
  return absl::OkStatus();
}

RbdNode::~RbdNode() {
  if (image_ == nullptr) return;
  // Waits for a callback that is running; none starts afterwards.
  if (update_watch_) Rbd().rbd_update_unwatch(image_, *update_watch_);
  int r = Rbd().rbd_close(image_);
  if (r < 0) {
    log::Error("node '{}': closing image '{}' failed: {}", node_name(), ImageName(),
               std::strerror(-r));
  }
}

absl::Status RbdNode::Truncate(uint64_t new_size) {
  if (read_only_) {
    return absl::FailedPreconditionError(
        fmt::format("node '{}': cannot resize: the node is read-only", node_name()));
  }
  int r = Rbd().rbd_resize(image_, new_size);
  if (r < 0) {
    return absl::ErrnoToStatus(-r, fmt::format("node '{}': cannot resize image '{}' to {} bytes",
                                               node_name(), ImageName(), new_size));
  }
  size_.store(new_size, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<IoQueue>> RbdNode::CreateDriverQueue() {
  absl::StatusOr<std::unique_ptr<RbdQueue>> queue = RbdQueue::Create(shared_from_this());
  if (!queue.ok()) return queue.status();
  return std::unique_ptr<IoQueue>(*std::move(queue));
}

std::string RbdNode::ImageName() const {
  std::string name = options_.pool + "/";
  if (!options_.name_space.empty()) name += options_.name_space + "/";
  name += options_.image;
  if (options_.snapshot) name += "@" + *options_.snapshot;
  return name;
}

std::string RbdNode::filename() const { return "rbd:" + ImageName(); }

std::string RbdNode::description() const {
  return fmt::format("rbd image {}{}", ImageName(), read_only_ ? " (read-only)" : "");
}

}  // namespace bexd::block
