// SPDX-License-Identifier: GPL-2.0-or-later
// SETATTR: the presented mode, owner and times, and the size.
#include <linux/fuse.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "fuse/ops/attributes.h"
#include "fuse/ops/file_range.h"
#include "fuse/ops/ops.h"
#include "fuse/ops/size_change.h"

namespace bexd::fuse::ops {
namespace {

// A client's explicit size change; 0, or the errno to answer.
int SetSize(Call& call, uint64_t size) {
  Session& session = call.session();
  const uint64_t current = session.CurrentSize();
  if (size == current) return 0;  // setting the size it has is no change, even read-only
  if (!session.options().writable) return EROFS;
  if (!session.resizable()) {
    static log::RateLimit refused;
    log::Limited(
        refused, log::Level::kWarn,
        "FUSE SETATTR: refused to resize node '{}' from {} to {} bytes: {}",
        session.node().node_name(), current, size,
        session.resize_allowed() ? "the node cannot be resized" : "the export is not growable");
    // EPERM: what truncate(2) documents for a file system that does not allow the change, what
    // the kernel answers for a memfd sealed against growing or shrinking, and what QEMU's FUSE
    // export answers when it may not resize. The export is writable (so not EROFS) and no
    // permission bit would allow it (so not EACCES).
    return EPERM;
  }
  if (size > kMaxOffset) return EFBIG;
  static log::RateLimit failed;
  return ChangeSize(call, size, SizeChange::kSet, failed);
}

}  // namespace

Answer Setattr(Call& call) {
  const auto in = call.args().Read<struct fuse_setattr_in>();
  Session& session = call.session();
  const NodeKind kind = call.node_kind();
  if (!Session::ValidTimes(in)) return Answer::Error(EINVAL);
  constexpr uint32_t kOtherAttributes = FATTR_MODE | FATTR_UID | FATTR_GID | FATTR_ATIME |
                                        FATTR_MTIME | FATTR_ATIME_NOW | FATTR_MTIME_NOW |
                                        FATTR_CTIME;
  if ((in.valid & kOtherAttributes) && !session.options().writable) return Answer::Error(EROFS);
  if ((in.valid & FATTR_MODE) && session.owner_only() && (in.mode & (S_IRWXG | S_IRWXO))) {
    return Answer::Error(EPERM);
  }

  if (in.valid & FATTR_SIZE) {
    if (kind == NodeKind::kDirectory) return Answer::Error(EISDIR);
    if (int error = SetSize(call, in.size)) return Answer::Error(error);
  }
  session.ApplyAttributes(kind, in);

  struct fuse_attr_out out;
  std::memset(&out, 0, sizeof(out));
  out.attr_valid = kAttributeValidSeconds;
  out.attr = AttrOf(session, kind);
  return call.Reply(out);
}

}  // namespace bexd::fuse::ops
