// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuse/call.h"

#include <linux/fuse.h>

#include <cerrno>
#include <cstring>

#include "fuse/op_table.h"
#include "fuse/queue.h"
#include "util/rate_limit.h"

namespace bexd::fuse {

Session& Call::session() const { return queue_.session(); }

QueueStats& Call::stats() const { return queue_.stats(); }

Answer Call::Reply(const void* payload, size_t bytes) {
  if (!reply_.Write(payload, bytes)) {
    static log::RateLimit no_reply_room;
    log::Limited(no_reply_room, log::Level::kDebug,
                 "FUSE request {}: {} reply bytes do not fit in {}", unique(),
                 sizeof(struct fuse_out_header) + bytes, state().out_bytes);
    return Answer::Error(EINVAL);
  }
  return Answer::Payload(bytes);
}

Answer Call::Submit(block::IoOp op, uint32_t flags, uint64_t offset, uint64_t length,
                    IoDoneFn done) {
  RequestState& state = request_->state;
  block::IoRequest& io = state.io;
  io.op = op;
  io.flags = flags;
  io.offset = offset;
  io.length = length;
  const bool has_data = block::HasData(op);
  io.iov = has_data ? state.data_iov : nullptr;
  io.iovcnt = has_data ? state.data_iov_count : 0;
  io.done = &Call::OnIoComplete;
  io.opaque = request_;
  io.status_data = false;
  state.io_done = done;
  queue_.io_queue().Submit(&io);
  return Answer::Pending();
}

void Call::OnIoComplete(block::IoRequest* io, int64_t result) {
  auto* request = static_cast<Request*>(io->opaque);
  Queue& queue = *request->state.queue;
  // The client sees only an errno; a failing disk must show in the log as well. EOPNOTSUPP and
  // EINVAL are refusals (an op the node lacks, a request a concurrent shrink left past the end),
  // not failures.
  if (result < 0 && result != -EOPNOTSUPP && result != -EINVAL) {
    static log::RateLimit failed;
    log::Limited(failed, log::Level::kWarn,
                 "FUSE {} (request {}): node '{}' failed {} bytes at offset {}: {}",
                 OpcodeName{request->state.opcode}, request->state.unique,
                 queue.session().node().node_name(), io->length, io->offset,
                 std::strerror(static_cast<int>(-result)));
  }
  // Block I/O is only ever for the file. The reply body starts after the header, whose room
  // Dispatch checked.
  Writer header_room(request->out, request->out_count, request->state.out_bytes);
  Writer reply;
  header_room.SplitAt(sizeof(struct fuse_out_header), &reply);
  Call call(queue, request, NodeKind::kFile, Reader(), reply);
  queue.Respond(request, request->state.io_done(call, result));
}

}  // namespace bexd::fuse
