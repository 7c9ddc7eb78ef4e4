// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuse/ops/attributes.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace bexd::fuse::ops {
namespace {

constexpr uint32_t kPageSize = 4096;
constexpr uint32_t kMaxBlockSize = uint32_t{1} << 20;  // the largest max_write

// st_blksize, the size I/O should come in: the node's request alignment (reads and writes that
// are multiples of it need no bounce buffer), as a power of two, at least a page.
uint32_t PreferredBlockSize(const block::BlockNode& node) {
  const uint32_t alignment = std::min(node.request_alignment(), kMaxBlockSize);
  return std::max(std::bit_ceil(alignment), kPageSize);
}

}  // namespace

struct fuse_attr AttrOf(const Session& session, NodeKind kind) {
  const NodeAttributes attributes = session.Attributes(kind);
  struct fuse_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  if (kind == NodeKind::kDirectory) {
    attr.ino = kRootNodeId;
    attr.nlink = 2;
  } else {
    attr.ino = session.file_node_id();
    attr.size = session.CurrentSize();
    // What the image takes on its storage, as QSD reports it: du and `qemu-img info` on the
    // export see the real footprint, and QEMU's qcow2 driver uses it to tell a preallocated image
    // (whose clusters it then asks the file about) from a full one. A node that cannot tell
    // counts as fully allocated.
    const uint64_t bytes = session.node().AllocatedBytes().value_or(attr.size);
    attr.blocks = bytes / 512 + (bytes % 512 != 0);
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
  attr.blksize = PreferredBlockSize(session.node());
  return attr;
}

}  // namespace bexd::fuse::ops
