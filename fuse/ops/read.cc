// SPDX-License-Identifier: GPL-2.0-or-later
// READ: the node's bytes land straight in the reply, past its header.
#include <linux/fuse.h>

#include <algorithm>
#include <cerrno>

#include "fuse/ops/file_range.h"
#include "fuse/ops/ops.h"
#include "util/rate_limit.h"

namespace bexd::fuse::ops {
namespace {

Answer ReadDone(Call& call, int64_t result) {
  if (result < 0) return Answer::IoError(result);
  const uint64_t bytes = std::min<uint64_t>(result, std::get<ReadState>(call.state().op).length);
  AddOnOwnerThread(call.stats().bytes_read, bytes);
  return Answer::Payload(bytes);
}

}  // namespace

Answer Read(Call& call) {
  const auto in = call.args().Read<struct fuse_read_in>();
  if (in.size > call.options().max_write || !RangeFits(in.offset, in.size)) {
    static log::RateLimit out_of_range;
    log::Limited(out_of_range, log::Level::kDebug, "FUSE READ of {} bytes at {} is out of range",
                 in.size, in.offset);
    return Answer::Error(EINVAL);
  }
  if (call.reply().remaining() < in.size) {
    static log::RateLimit no_room;
    log::Limited(no_room, log::Level::kDebug, "FUSE READ of {} bytes: {} reply bytes have room",
                 in.size, call.state().out_bytes);
    return Answer::Error(EINVAL);
  }
  const uint64_t size = call.node().size();
  const uint32_t length =
      in.offset >= size ? 0 : static_cast<uint32_t>(std::min<uint64_t>(in.size, size - in.offset));
  if (length == 0) return Answer::Empty();  // at or past the end

  RequestState& state = call.state();
  state.data_iov_count = call.reply().SplitData(length, state.data_iov, kMaxDataIovecs);
  if (state.data_iov_count < 0) {
    static log::RateLimit split;
    log::Limited(split, log::Level::kDebug,
                 "FUSE READ reply buffers are split into more than {} pieces", kMaxDataIovecs);
    return Answer::Error(EINVAL);
  }
  state.op = ReadState{length};
  return call.Submit(block::IoOp::kRead, 0, in.offset, length, ReadDone);
}

}  // namespace bexd::fuse::ops
