// SPDX-License-Identifier: GPL-2.0-or-later
// FALLOCATE: reserve (mode 0), zero (ZERO_RANGE) or punch (PUNCH_HOLE|KEEP_SIZE) a range.
#include <linux/falloc.h>
#include <linux/fuse.h>

#include <algorithm>
#include <cerrno>

#include "fuse/ops/file_range.h"
#include "fuse/ops/ops.h"
#include "fuse/ops/size_change.h"

namespace bexd::fuse::ops {
namespace {

Answer FallocateDone(Call& call, int64_t result) {
  return result < 0 ? Answer::IoError(result) : Answer::Empty();
}

}  // namespace

Answer Fallocate(Call& call) {
  const auto in = call.args().Read<struct fuse_fallocate_in>();
  Session& session = call.session();
  constexpr uint32_t kKnownModes =
      FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
  const bool punch = in.mode & FALLOC_FL_PUNCH_HOLE;
  const bool zero = in.mode & FALLOC_FL_ZERO_RANGE;
  const bool keep_size = in.mode & FALLOC_FL_KEEP_SIZE;
  if ((in.mode & ~kKnownModes) || (punch && zero) || (punch && !keep_size)) {
    return Answer::Error(EOPNOTSUPP);  // what vfs_fallocate() answers for these combinations
  }
  if (in.length == 0) return Answer::Error(EINVAL);
  if (!RangeFits(in.offset, in.length)) return Answer::Error(EFBIG);
  if (!session.options().writable) return Answer::Error(EROFS);
  const block::Capabilities& capabilities = session.capabilities();
  // What a file system answers for a mode it does not implement.
  if ((punch || zero) && !capabilities.write_zeroes) return Answer::Error(EOPNOTSUPP);

  const uint64_t end = in.offset + in.length;
  uint64_t size = session.CurrentSize();
  const bool reserve = !(punch || zero);
  // A node that cannot reserve space fails a reservation of any of its present bytes before
  // anything changes; one wholly at or past the end only grows the node, as QSD's does.
  if (reserve && !capabilities.allocate && in.offset < size) return Answer::Error(EOPNOTSUPP);
  if (!keep_size && end > size) {
    // An explicit size change, like truncate (as QSD grows a writable export here). Where size
    // changes need `growable` (virtio-fs), a fixed-size disk has no room past its end: ENOSPC.
    if (!session.resizable()) return Answer::Error(ENOSPC);
    static log::RateLimit failed;
    if (int error = ChangeSize(call, end, SizeChange::kGrow, failed)) return Answer::Error(error);
    size = session.CurrentSize();
  }
  const uint64_t range_end = std::min(end, size);
  // KEEP_SIZE wholly past the end: nothing of the node to touch. A node that cannot reserve has
  // grown over the whole range (its new bytes read as zeroes), which is all it can do.
  if (in.offset >= range_end || (reserve && !capabilities.allocate)) return Answer::Empty();
  if (reserve) {
    // Plain allocation: the caller wants the space reserved now (ENOSPC now rather than on a
    // later write), so the driver reserves it in the backing storage.
    return call.Submit(block::IoOp::kAllocate, 0, in.offset, range_end - in.offset, FallocateDone);
  }
  // A punched hole must read back as zeroes, which kDiscard does not promise: write zeroes and let
  // the driver deallocate. A node that frees no storage (discard=ignore) still zeroes the range:
  // the client's data is gone as it asked, only the space stays allocated (st_blocks shows it).
  const bool unmap = punch && capabilities.discard;
  return call.Submit(block::IoOp::kWriteZeroes, unmap ? uint32_t{block::kIoMayUnmap} : 0u,
                     in.offset, range_end - in.offset, FallocateDone);
}

}  // namespace bexd::fuse::ops
