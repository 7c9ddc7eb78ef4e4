// SPDX-License-Identifier: GPL-2.0-or-later
// LSEEK: SEEK_SET and SEEK_END by arithmetic, SEEK_DATA and SEEK_HOLE by asking the node's block
// status extent by extent.
#include <linux/fuse.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "fuse/ops/file_range.h"
#include "fuse/ops/ops.h"

namespace bexd::fuse::ops {
namespace {

Answer ReplyOffset(Call& call, uint64_t offset) { return call.Reply(fuse_lseek_out{offset}); }

Answer SubmitBlockStatus(Call& call);

Answer BlockStatusDone(Call& call, int64_t result) {
  if (result < 0) return Answer::IoError(result);
  SeekState& seek = std::get<SeekState>(call.state().op);
  const bool want_data = seek.whence == SEEK_DATA;
  if (result > 0 && call.state().io.status_data == want_data) {
    return ReplyOffset(call, seek.position);
  }
  const uint64_t size = call.session().CurrentSize();
  seek.position += static_cast<uint64_t>(result);
  if (result == 0 || seek.position >= size) {
    if (want_data) return Answer::Error(ENXIO);
    return ReplyOffset(call, std::min(seek.position, size));  // the hole at the end
  }
  return SubmitBlockStatus(call);
}

Answer SubmitBlockStatus(Call& call) {
  const uint64_t position = std::get<SeekState>(call.state().op).position;
  return call.Submit(block::IoOp::kBlockStatus, 0, position,
                     call.session().CurrentSize() - position, BlockStatusDone);
}

}  // namespace

Answer Lseek(Call& call) {
  const auto in = call.args().Read<struct fuse_lseek_in>();
  const uint64_t size = call.session().CurrentSize();
  switch (in.whence) {
    case SEEK_SET:
      if (in.offset > kMaxOffset) break;
      return ReplyOffset(call, in.offset);
    case SEEK_END: {
      const int64_t delta = static_cast<int64_t>(in.offset);
      if ((delta < 0 && static_cast<uint64_t>(-(delta + 1)) >= size) ||
          (delta > 0 && static_cast<uint64_t>(delta) > kMaxOffset - size)) {
        break;
      }
      return ReplyOffset(call, size + delta);
    }
    case SEEK_DATA:
    case SEEK_HOLE:
      if (in.offset >= size) return Answer::Error(ENXIO);
      if (!call.session().capabilities().block_status) {
        // All data, as the kernel's generic llseek has it for file systems without holes: the
        // data is here, the only hole at the end.
        return ReplyOffset(call, in.whence == SEEK_DATA ? in.offset : size);
      }
      call.state().op = SeekState{in.whence, in.offset};
      return SubmitBlockStatus(call);
    default:  // SEEK_CUR: the position lives in the kernel, which never asks
      break;
  }
  return Answer::Error(EINVAL);
}

}  // namespace bexd::fuse::ops
