// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuse/queue.h"

#include <linux/fuse.h>
#include <time.h>

#include <cerrno>

#include "fuse/call.h"
#include "fuse/op_table.h"
#include "fuse/scatter_gather.h"
#include "util/rate_limit.h"

namespace bexd::fuse {
namespace {

uint64_t MonotonicNs() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);
}

int LatencyBucket(uint64_t microseconds) {
  if (microseconds == 0) return 0;
  const int log2 = 63 - __builtin_clzll(microseconds);
  return log2 < QueueStats::kLatencyBuckets ? log2 : QueueStats::kLatencyBuckets - 1;
}

// 0 if a node of `kind` is what `target` wants, else the errno to answer.
int TargetError(Target target, NodeKind kind) {
  if (target == Target::kNoNode) return 0;
  if (kind == NodeKind::kNone) return ENOENT;
  if (target == Target::kFile && kind != NodeKind::kFile) return EISDIR;
  if (target == Target::kDirectory && kind != NodeKind::kDirectory) return ENOTDIR;
  return 0;
}

}  // namespace

Queue::Queue(std::shared_ptr<Session> session, std::unique_ptr<block::IoQueue> io_queue,
             CompletionFn done, void* context)
    : session_(std::move(session)),
      io_queue_(std::move(io_queue)),
      done_(done),
      context_(context) {}

void Queue::Dispatch(Request* request) {
  RequestState& state = request->state;
  state.queue = this;
  state.start_ns = MonotonicNs();
  state.unique = 0;
  state.opcode = 0;
  state.op = std::monostate();
  AddOnOwnerThread(stats_.requests, uint64_t{1});
  AddOnOwnerThread(stats_.in_flight, uint32_t{1});

  size_t in_bytes;
  if (!TotalBytes(request->in, request->in_count, &in_bytes) ||
      !TotalBytes(request->out, request->out_count, &state.out_bytes)) {
    static log::RateLimit bad_iovecs;
    log::Limited(bad_iovecs, log::Level::kDebug,
                 "FUSE request with an invalid iovec array (in {}, out {})", request->in_count,
                 request->out_count);
    Respond(request, Answer::Rejected(EINVAL));
    return;
  }
  if (in_bytes < sizeof(struct fuse_in_header)) {
    static log::RateLimit short_request;
    log::Limited(short_request, log::Level::kDebug,
                 "FUSE request of {} bytes is shorter than its header", in_bytes);
    Respond(request, Answer::Rejected(EINVAL));
    return;
  }
  Reader args(request->in, request->in_count, in_bytes);
  const auto in = args.Read<struct fuse_in_header>();
  if (in.len != in_bytes) {
    static log::RateLimit length_mismatch;
    log::Limited(length_mismatch, log::Level::kDebug,
                 "FUSE request header says {} bytes, the buffers hold {}", in.len, in_bytes);
    Respond(request, Answer::Rejected(EINVAL));
    return;
  }
  state.unique = in.unique;
  state.opcode = in.opcode;
  const OpcodeName name{in.opcode};

  const size_t extension_bytes = size_t{in.total_extlen} * 8;
  if (extension_bytes > args.remaining()) {
    static log::RateLimit long_extensions;
    log::Limited(long_extensions, log::Level::kDebug,
                 "FUSE {} (request {}): {} extension bytes exceed its length", name, in.unique,
                 extension_bytes);
    Respond(request, Answer::Error(EINVAL));
    return;
  }
  args.Limit(args.remaining() - extension_bytes);

  const Operation* operation = FindOperation(in.opcode);
  if (operation == nullptr) operation = &kUnknownOperation;
  if (operation->needs_init && !session_->initialized()) {
    static log::RateLimit before_init;
    log::Limited(before_init, log::Level::kDebug, "FUSE {} (request {}) before INIT", name,
                 in.unique);
    Respond(request, Answer::Error(EIO));
    return;
  }
  if (operation->counter != nullptr) AddOnOwnerThread(stats_.*operation->counter, uint64_t{1});
  if (args.remaining() < operation->min_arg_bytes) {
    static log::RateLimit short_arguments;
    log::Limited(short_arguments, log::Level::kDebug,
                 "FUSE {} (request {}): {} argument bytes, needs {}", name, in.unique,
                 args.remaining(), operation->min_arg_bytes);
    Respond(request, operation->replies ? Answer::Error(EINVAL) : Answer::Rejected(EINVAL));
    return;
  }
  Writer header_room(request->out, request->out_count, state.out_bytes);
  Writer reply;
  if (operation->replies && !header_room.SplitAt(sizeof(struct fuse_out_header), &reply)) {
    Respond(request, Answer::Rejected(ENOBUFS));  // not even an error reply fits
    return;
  }
  if (reply.remaining() < operation->reply_bytes) {
    static log::RateLimit no_reply_room;
    log::Limited(no_reply_room, log::Level::kDebug,
                 "FUSE {} (request {}): {} reply bytes do not fit in {}", name, in.unique,
                 sizeof(struct fuse_out_header) + operation->reply_bytes, state.out_bytes);
    Respond(request, Answer::Error(EINVAL));
    return;
  }
  const NodeKind kind =
      operation->target == Target::kNoNode ? NodeKind::kNone : session_->KindOf(in.nodeid);
  if (int error = TargetError(operation->target, kind)) {
    Respond(request, Answer::Error(error));
    return;
  }
  Call call(*this, request, kind, args, reply);
  Respond(request, operation->handler(call));
}

void Queue::Respond(Request* request, Answer answer) {
  RequestState& state = request->state;
  switch (answer.kind()) {
    case Answer::Kind::kPending:
      return;
    case Answer::Kind::kNoReply:
      Finish(request, 0, false);
      return;
    case Answer::Kind::kRejected:
      Finish(request, -answer.error(), true);
      return;
    case Answer::Kind::kError:
    case Answer::Kind::kPayload:
      break;
  }
  int error = answer.error();
  size_t payload_bytes = answer.payload_bytes();
  if (answer.kind() == Answer::Kind::kError) {
    if (error <= 0 || error > 4095) error = EIO;  // never a success or a bogus errno by accident
    payload_bytes = 0;
  }
  const uint32_t length = static_cast<uint32_t>(sizeof(struct fuse_out_header) + payload_bytes);
  const struct fuse_out_header header { length, -error, state.unique };
  if (!Writer(request->out, request->out_count, state.out_bytes).Write(header)) {
    Finish(request, -ENOBUFS, true);
    return;
  }
  Finish(request, length, error != 0);
}

void Queue::Finish(Request* request, int64_t result, bool failed) {
  const uint64_t elapsed_us = (MonotonicNs() - request->state.start_ns) / 1000;
  AddOnOwnerThread(stats_.latency_us[LatencyBucket(elapsed_us)], uint64_t{1});
  if (failed) AddOnOwnerThread(stats_.errors, uint64_t{1});
  AddOnOwnerThread(stats_.in_flight, ~uint32_t{0});  // minus one, modulo 2^32
  done_(request, result, context_);
}

}  // namespace bexd::fuse
