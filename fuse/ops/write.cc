// SPDX-License-Identifier: GPL-2.0-or-later
// WRITE: the block layer writes straight from the request's data, past its fuse_write_in.
#include <fcntl.h>
#include <linux/fuse.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fuse/ops/file_range.h"
#include "fuse/ops/ops.h"
#include "fuse/ops/size_change.h"
#include "util/rate_limit.h"

namespace bexd::fuse::ops {
namespace {

Answer ReplyWritten(Call& call, uint32_t written) {
  struct fuse_write_out out;
  std::memset(&out, 0, sizeof(out));
  out.size = written;
  AddOnOwnerThread(call.stats().bytes_written, uint64_t{written});
  return call.Reply(out);
}

Answer FlushAfterWriteDone(Call& call, int64_t result) {
  if (result < 0) return Answer::IoError(result);
  return ReplyWritten(call, std::get<WriteState>(call.state().op).written);
}

Answer WriteDone(Call& call, int64_t result) {
  WriteState& write = std::get<WriteState>(call.state().op);
  // A growable export grew the node for this write, but another client's truncate (an open with
  // O_TRUNC, say) shrank it again before the node checked the range: grow once more and write,
  // as if the write had come after the truncate.
  if (result == -EINVAL && call.options().growable && !write.retried &&
      write.offset + write.length > call.node().size()) {
    write.retried = true;
    static log::RateLimit failed;
    if (int error = ChangeSize(call, write.offset + write.length, SizeChange::kGrow, failed)) {
      return Answer::Error(error);
    }
    return call.Submit(block::IoOp::kWrite, write.flags, write.offset, write.length, WriteDone);
  }
  if (result < 0) return Answer::IoError(result);
  const auto written = static_cast<uint32_t>(std::min<uint64_t>(result, write.length));
  if (write.flush_after) {
    write.written = written;
    return call.Submit(block::IoOp::kFlush, 0, 0, 0, FlushAfterWriteDone);
  }
  return ReplyWritten(call, written);
}

}  // namespace

Answer Write(Call& call) {
  const auto in = call.args().Read<struct fuse_write_in>();
  const SessionOptions& options = call.options();
  if (call.args().remaining() != in.size) {
    static log::RateLimit size_mismatch;
    log::Limited(size_mismatch, log::Level::kDebug, "FUSE WRITE of {} bytes carries {}", in.size,
                 call.args().remaining());
    return Answer::Error(EINVAL);
  }
  if (in.size > options.max_write || !RangeFits(in.offset, in.size)) {
    static log::RateLimit out_of_range;
    log::Limited(out_of_range, log::Level::kDebug, "FUSE WRITE of {} bytes at {} is out of range",
                 in.size, in.offset);
    return Answer::Error(EINVAL);
  }
  if (!options.writable) return Answer::Error(EROFS);

  const uint64_t size = call.node().size();
  uint32_t length = in.size;
  if (in.offset + length > size) {
    if (options.growable) {
      static log::RateLimit failed;
      if (int error = ChangeSize(call, in.offset + length, SizeChange::kGrow, failed)) {
        return Answer::Error(error);
      }
    } else if (in.offset >= size) {
      // Nothing fits past the end. QSD writes nothing there and the kernel turns that into EIO
      // for the writer, which is what iotest 308 expects ("dd: error writing ...: Input/output
      // error").
      return Answer::Error(EIO);
    } else {
      length = static_cast<uint32_t>(size - in.offset);  // a short write up to the end
    }
  }
  if (length == 0) return ReplyWritten(call, 0);
  RequestState& state = call.state();
  state.data_iov_count = call.args().SplitData(length, state.data_iov, kMaxDataIovecs);
  if (state.data_iov_count < 0) {
    static log::RateLimit split;
    log::Limited(split, log::Level::kDebug, "FUSE WRITE data is split into more than {} pieces",
                 kMaxDataIovecs);
    return Answer::Error(EINVAL);
  }
  // O_SYNC and O_DSYNC opens (their flags ride along in the request) get the same durability as
  // a writethrough export: a FUA write, or a flush after it where the node has no FUA.
  const bool durable = options.writethrough || (in.flags & O_DSYNC);
  const block::Capabilities& capabilities = call.session().capabilities();
  const bool fua = durable && capabilities.fua;
  const uint32_t flags = fua ? uint32_t{block::kIoFua} : 0u;
  state.op = WriteState{.length = length,
                        .flush_after = durable && !fua && capabilities.flush,
                        .offset = in.offset,
                        .flags = flags};
  return call.Submit(block::IoOp::kWrite, flags, in.offset, length, WriteDone);
}

}  // namespace bexd::fuse::ops
