// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuse/session.h"

#include <absl/strings/str_cat.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

namespace bexd::fuse {
namespace {

constexpr uint32_t kPageSize = 4096;
constexpr uint32_t kMaxWriteLimit = uint32_t{1} << 20;
constexpr uint32_t kPermissionBits = 07777;

struct timespec Now() {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return now;
}

absl::Status CheckFileName(const std::string& name) {
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("file name '", name, "' is not a file name"));
  }
  if (name.size() > 255) {
    return absl::InvalidArgumentError(absl::StrCat("file name '", name, "' is longer than 255"));
  }
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("file name '", name, "' contains '/' or a NUL byte"));
  }
  return absl::OkStatus();
}

bool ValidNanoseconds(uint32_t nsec) { return nsec < 1000000000; }

}  // namespace

absl::StatusOr<std::shared_ptr<Session>> Session::Create(std::shared_ptr<block::BlockNode> node,
                                                         SessionOptions options) {
  if (node == nullptr) return absl::InvalidArgumentError("FUSE session needs a block node");
  const std::string who = absl::StrCat("FUSE session on node '", node->node_name(), "': ");
  if (options.writable && node->read_only()) {
    return absl::InvalidArgumentError(absl::StrCat(who, "writable export of a read-only node"));
  }
  // As QSD: growable only changes what writes do, so a read-only export ignores it.
  if (!options.writable) options.growable = false;
  if (options.growable && !node->capabilities().resize) {
    return absl::InvalidArgumentError(absl::StrCat(who, "growable export of a node that cannot be ",
                                                   "resized (", node->description(), ")"));
  }
  if (options.max_write < kPageSize || options.max_write > kMaxWriteLimit ||
      options.max_write % kPageSize != 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, "max_write ", options.max_write,
                                                   " is not a multiple of ", kPageSize, " between ",
                                                   kPageSize, " and ", kMaxWriteLimit));
  }
  if ((options.file_mode & ~kPermissionBits) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "file mode ", absl::Hex(options.file_mode), " has non-permission bits"));
  }
  if (options.directory_root) {
    if (absl::Status status = CheckFileName(options.file_name); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(who, status.message()));
    }
  }
  if (options.timestamp.has_value() && !ValidNanoseconds(options.timestamp->tv_nsec)) {
    return absl::InvalidArgumentError(absl::StrCat(who, "timestamp nanoseconds out of range"));
  }
  return std::shared_ptr<Session>(new Session(std::move(node), std::move(options)));
}

Session::Session(std::shared_ptr<block::BlockNode> node, SessionOptions options)
    : node_(std::move(node)),
      capabilities_(node_->capabilities()),
      options_(std::move(options)),
      file_node_id_(options_.directory_root ? kFileInDirectoryNodeId : kRootNodeId) {
  const struct timespec time = options_.timestamp.value_or(Now());
  uint32_t permissions = options_.file_mode;
  if (permissions == 0) permissions = options_.writable ? 0600 : 0400;
  file_attributes_ = {S_IFREG | permissions, options_.uid, options_.gid, time, time, time};
  // The directory is searchable and listable by whoever may read the file; it is never writable.
  const uint32_t readable = permissions & 0444;
  directory_attributes_ = {
      S_IFDIR | readable | (readable >> 2), options_.uid, options_.gid, time, time, time};
}

NodeKind Session::KindOf(uint64_t node_id) const {
  if (node_id == file_node_id_) return NodeKind::kFile;
  if (options_.directory_root && node_id == kRootNodeId) return NodeKind::kDirectory;
  return NodeKind::kNone;
}

size_t Session::max_request_bytes() const {
  return std::max<size_t>(
      FUSE_MIN_READ_BUFFER,
      sizeof(struct fuse_in_header) + sizeof(struct fuse_write_in) + options_.max_write);
}

size_t Session::max_reply_bytes() const {
  return sizeof(struct fuse_out_header) + options_.max_write;
}

void Session::MarkInitialized(uint32_t protocol_minor, bool io_uring) {
  open_handles_.store(0, std::memory_order_relaxed);
  protocol_minor_.store(protocol_minor, std::memory_order_relaxed);
  io_uring_.store(io_uring, std::memory_order_relaxed);
  initialized_.store(true, std::memory_order_release);
}

void Session::MarkDestroyed() {
  initialized_.store(false, std::memory_order_release);
  open_handles_.store(0, std::memory_order_relaxed);
}

void Session::HandleOpened() { open_handles_.fetch_add(1, std::memory_order_relaxed); }

void Session::HandleReleased() {
  // A RELEASE without its OPEN (a confused or hostile client) must not wrap the count around.
  uint32_t count = open_handles_.load(std::memory_order_relaxed);
  while (count > 0 &&
         !open_handles_.compare_exchange_weak(count, count - 1, std::memory_order_relaxed)) {
  }
}

NodeAttributes Session::Attributes(NodeKind kind) const {
  std::lock_guard lock(attributes_mutex_);
  return kind == NodeKind::kDirectory ? directory_attributes_ : file_attributes_;
}

bool Session::ValidTimes(const struct fuse_setattr_in& in) {
  return (!(in.valid & FATTR_ATIME) || ValidNanoseconds(in.atimensec)) &&
         (!(in.valid & FATTR_MTIME) || ValidNanoseconds(in.mtimensec)) &&
         (!(in.valid & FATTR_CTIME) || ValidNanoseconds(in.ctimensec));
}

int Session::ApplyAttributes(NodeKind kind, const struct fuse_setattr_in& in) {
  if (!ValidTimes(in)) return EINVAL;
  const bool set_atime = (in.valid & FATTR_ATIME) && !(in.valid & FATTR_ATIME_NOW);
  const bool set_mtime = (in.valid & FATTR_MTIME) && !(in.valid & FATTR_MTIME_NOW);
  const struct timespec now = Now();
  std::lock_guard lock(attributes_mutex_);
  NodeAttributes& attributes =
      kind == NodeKind::kDirectory ? directory_attributes_ : file_attributes_;
  if (in.valid & FATTR_MODE) {
    attributes.mode = (attributes.mode & ~kPermissionBits) | (in.mode & kPermissionBits);
  }
  if (in.valid & FATTR_UID) attributes.uid = in.uid;
  if (in.valid & FATTR_GID) attributes.gid = in.gid;
  if (in.valid & FATTR_ATIME_NOW) {
    attributes.atime = now;
  } else if (set_atime) {
    attributes.atime = {static_cast<time_t>(in.atime), static_cast<long>(in.atimensec)};
  }
  if (in.valid & FATTR_MTIME_NOW) {
    attributes.mtime = now;
  } else if (set_mtime) {
    attributes.mtime = {static_cast<time_t>(in.mtime), static_cast<long>(in.mtimensec)};
  }
  // Any attribute change is a status change.
  if (in.valid & FATTR_CTIME) {
    attributes.ctime = {static_cast<time_t>(in.ctime), static_cast<long>(in.ctimensec)};
  } else if (in.valid &
             (FATTR_MODE | FATTR_UID | FATTR_GID | FATTR_ATIME | FATTR_MTIME | FATTR_SIZE)) {
    attributes.ctime = now;
  }
  return 0;
}

uint64_t Session::CurrentSize() const {
  if (passthrough_ != nullptr && options_.growable && passthrough_->opens() > 0) {
    node_->RefreshSize();
  }
  return node_->size();
}

absl::Status Session::GrowTo(uint64_t end) {
  if (node_->size() >= end) return absl::OkStatus();
  const uint64_t alignment = capabilities_.size_alignment;
  // Past INT64_MAX the node refuses the size anyway (EFBIG); rounding must not wrap it to 0.
  if (end > static_cast<uint64_t>(INT64_MAX)) return node_->GrowTo(end);
  return node_->GrowTo((end + alignment - 1) / alignment * alignment);
}

absl::Status Session::Resize(uint64_t size) { return node_->Resize(size); }

}  // namespace bexd::fuse
