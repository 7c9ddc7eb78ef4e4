// SPDX-License-Identifier: GPL-2.0-or-later
// STATFS.
#include <linux/fuse.h>

#include <cstring>

#include "fuse/ops/ops.h"

namespace bexd::fuse::ops {
namespace {

constexpr uint32_t kBlockSize = 4096;

}  // namespace

// Nothing is free: the file is the whole file system.
Answer Statfs(Call& call) {
  struct fuse_statfs_out out;
  std::memset(&out, 0, sizeof(out));
  const uint64_t size = call.session().CurrentSize();
  out.st.bsize = kBlockSize;
  out.st.frsize = kBlockSize;
  out.st.blocks = size / kBlockSize + (size % kBlockSize != 0);
  out.st.files = call.options().directory_root ? 2 : 1;
  out.st.namelen = 255;
  return call.Reply(out);
}

}  // namespace bexd::fuse::ops
