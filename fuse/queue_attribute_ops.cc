// GETATTR and SETATTR.
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "fuse/queue.h"
#include "fuse/status_errno.h"
#include "util/rate_limit.h"

namespace bexd::fuse {
namespace {

// How long the kernel may cache attributes and names. The size can change behind its back (a
// resize through the control socket), so keep this short.
constexpr uint64_t kAttributeValidSeconds = 1;
constexpr uint32_t kPreferredBlockSize = 4096;

}  // namespace

struct fuse_attr Queue::AttrOf(NodeKind kind) const {
  const NodeAttributes attributes = session_->Attributes(kind);
  struct fuse_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  if (kind == NodeKind::kDirectory) {
    attr.ino = kRootNodeId;
    attr.nlink = 2;
  } else {
    attr.ino = session_->file_node_id();
    attr.size = session_->node().size();
    // Presented as fully allocated: the block layer does not report allocation.
    attr.blocks = attr.size / 512 + (attr.size % 512 != 0);
    attr.nlink = 1;
  }
  attr.atime = attributes.atime.tv_sec;
  attr.atimensec = attributes.atime.tv_nsec;
  attr.mtime = attributes.mtime.tv_sec;
  attr.mtimensec = attributes.mtime.tv_nsec;
  attr.ctime = attributes.ctime.tv_sec;
  attr.ctimensec = attributes.ctime.tv_nsec;
  attr.mode = attributes.mode;
  attr.uid = attributes.uid;
  attr.gid = attributes.gid;
  attr.blksize = kPreferredBlockSize;
  return attr;
}

void Queue::HandleGetattr(Request* request, const Header& header) {
  struct fuse_getattr_in in;
  if (!ReadArgs(request, header, &in)) return;
  const NodeKind kind = session_->KindOf(header.node_id);
  if (kind == NodeKind::kNone) {
    ReplyError(request, ENOENT);
    return;
  }
  struct fuse_attr_out out;
  std::memset(&out, 0, sizeof(out));
  out.attr_valid = kAttributeValidSeconds;
  out.attr = AttrOf(kind);
  Reply(request, out);
}

void Queue::HandleSetattr(Request* request, const Header& header) {
  struct fuse_setattr_in in;
  if (!ReadArgs(request, header, &in)) return;
  const NodeKind kind = session_->KindOf(header.node_id);
  if (kind == NodeKind::kNone) {
    ReplyError(request, ENOENT);
    return;
  }
  if (!Session::ValidTimes(in)) {
    ReplyError(request, EINVAL);
    return;
  }
  if (!RequireReplyRoom(request, sizeof(struct fuse_attr_out))) return;
  constexpr uint32_t kOtherAttributes = FATTR_MODE | FATTR_UID | FATTR_GID | FATTR_ATIME |
                                        FATTR_MTIME | FATTR_ATIME_NOW | FATTR_MTIME_NOW |
                                        FATTR_CTIME;
  if ((in.valid & kOtherAttributes) && !session_->options().writable) {
    ReplyError(request, EROFS);
    return;
  }

  if (in.valid & FATTR_SIZE) {
    if (kind == NodeKind::kDirectory) {
      ReplyError(request, EISDIR);
      return;
    }
    if (int error = ChangeSize(in.size); error != 0) {
      ReplyError(request, error);
      return;
    }
  }
  session_->ApplyAttributes(kind, in);

  struct fuse_attr_out out;
  std::memset(&out, 0, sizeof(out));
  out.attr_valid = kAttributeValidSeconds;
  out.attr = AttrOf(kind);
  Reply(request, out);
}

int Queue::ChangeSize(uint64_t size) {
  const uint64_t current = session_->node().size();
  if (size == current) return 0;  // setting the size it has is no change, even read-only
  if (!session_->options().writable) return EROFS;
  if (!session_->resizable()) {
    static log::RateLimit refused;
    log::Limited(refused, log::Level::kWarn,
                 "FUSE SETATTR: refused to resize node '{}' from {} to {} bytes: the export is "
                 "not growable",
                 session_->node().node_name(), current, size);
    // EPERM: what truncate(2) documents for a file system that does not allow the change, and
    // what QEMU's FUSE export answers when it may not resize. The export is writable (so not
    // EROFS) and no permission bit would allow it (so not EACCES).
    return EPERM;
  }
  if (size > static_cast<uint64_t>(INT64_MAX)) return EFBIG;
  if (absl::Status status = session_->Resize(size); !status.ok()) {
    static log::RateLimit failed;
    log::Limited(failed, log::Level::kWarn, "FUSE SETATTR: resizing node '{}' to {} failed: {}",
                 session_->node().node_name(), size, status.ToString());
    return ErrnoOf(status);
  }
  return 0;
}

}  // namespace bexd::fuse
