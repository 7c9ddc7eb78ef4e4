#include "fuse/queue.h"

#include <time.h>

#include <cerrno>
#include <climits>

#include "block/iov_util.h"
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
  state.length = 0;
  AddOnOwnerThread(stats_.requests, uint64_t{1});
  AddOnOwnerThread(stats_.in_flight, uint32_t{1});

  size_t in_bytes;
  struct fuse_in_header in;
  if (!TotalBytes(request->in, request->in_count, &in_bytes) ||
      !TotalBytes(request->out, request->out_count, &state.out_bytes)) {
    static log::RateLimit bad_iovecs;
    log::Limited(bad_iovecs, log::Level::kDebug,
                 "FUSE request with an invalid iovec array (in {}, out {})", request->in_count,
                 request->out_count);
    Finish(request, -EINVAL, true);
    return;
  }
  if (in_bytes < sizeof(in)) {
    static log::RateLimit short_request;
    log::Limited(short_request, log::Level::kDebug,
                 "FUSE request of {} bytes is shorter than its header", in_bytes);
    Finish(request, -EINVAL, true);
    return;
  }
  CopyFromIn(request, 0, &in, sizeof(in));
  if (in.len != in_bytes) {
    static log::RateLimit length_mismatch;
    log::Limited(length_mismatch, log::Level::kDebug,
                 "FUSE request header says {} bytes, the buffers hold {}", in.len, in_bytes);
    Finish(request, -EINVAL, true);
    return;
  }
  state.unique = in.unique;
  state.opcode = in.opcode;

  const size_t extension_bytes = size_t{in.total_extlen} * 8;
  if (extension_bytes > in.len - sizeof(in)) {
    static log::RateLimit long_extensions;
    log::Limited(long_extensions, log::Level::kDebug,
                 "FUSE request {} opcode {}: {} extension bytes exceed its length", in.unique,
                 in.opcode, extension_bytes);
    ReplyError(request, EINVAL);
    return;
  }
  const Header header{in.opcode, in.nodeid, in.len - sizeof(in) - extension_bytes};

  switch (in.opcode) {
    case FUSE_FORGET:
    case FUSE_BATCH_FORGET:
    case FUSE_INTERRUPT:
    case FUSE_NOTIFY_REPLY:
      HandleNoReply(request, header);
      return;
    case FUSE_INIT:
      HandleInit(request, header);
      return;
    default:
      break;
  }
  if (!session_->initialized()) {
    static log::RateLimit before_init;
    log::Limited(before_init, log::Level::kDebug, "FUSE request {} opcode {} before INIT",
                 in.unique, in.opcode);
    ReplyError(request, EIO);
    return;
  }
  switch (in.opcode) {
    case FUSE_READ:
      AddOnOwnerThread(stats_.read_requests, uint64_t{1});
      HandleRead(request, header);
      return;
    case FUSE_WRITE:
      AddOnOwnerThread(stats_.write_requests, uint64_t{1});
      HandleWrite(request, header);
      return;
    case FUSE_GETATTR:
      HandleGetattr(request, header);
      return;
    case FUSE_SETATTR:
      HandleSetattr(request, header);
      return;
    case FUSE_OPEN:
      HandleOpen(request, header);
      return;
    case FUSE_RELEASE:
      HandleRelease(request, header);
      return;
    case FUSE_FLUSH:
      HandleFlush(request, header);
      return;
    case FUSE_FSYNC:
      HandleFsync(request, header);
      return;
    case FUSE_FALLOCATE:
      HandleFallocate(request, header);
      return;
    case FUSE_LSEEK:
      HandleLseek(request, header);
      return;
    case FUSE_STATFS:
      HandleStatfs(request, header);
      return;
    case FUSE_DESTROY:
      HandleDestroy(request, header);
      return;
    case FUSE_LOOKUP:
      HandleLookup(request, header);
      return;
    case FUSE_OPENDIR:
      HandleOpendir(request, header);
      return;
    case FUSE_READDIR:
      HandleReaddir(request, header, /*plus=*/false);
      return;
    case FUSE_READDIRPLUS:
      HandleReaddir(request, header, /*plus=*/true);
      return;
    case FUSE_RELEASEDIR:
      HandleReleasedir(request, header);
      return;
    case FUSE_READLINK:
      ReplyError(request, EINVAL);  // neither node is a symlink
      return;
    case FUSE_MKNOD:
    case FUSE_MKDIR:
    case FUSE_SYMLINK:
    case FUSE_UNLINK:
    case FUSE_RMDIR:
    case FUSE_RENAME:
    case FUSE_RENAME2:
    case FUSE_LINK:
    case FUSE_CREATE:
    case FUSE_TMPFILE:
      ReplyError(request, EPERM);  // the tree is fixed: one directory, one file
      return;
    default:
      // ACCESS, the xattr calls, locks, ioctl, poll, copy_file_range, ... : the kernel remembers
      // ENOSYS and stops asking (falling back to its own implementation where it has one).
      ReplyError(request, ENOSYS);
      return;
  }
}

void Queue::CopyFromIn(const Request* request, size_t offset, void* dst, size_t n) {
  block::IovCursor(request->in, request->in_count, offset).CopyOut(dst, n);
}

void Queue::CopyToOut(const Request* request, size_t offset, const void* src, size_t n) {
  block::IovCursor(request->out, request->out_count, offset).CopyIn(src, n);
}

bool Queue::ReadArgs(Request* request, const Header& header, void* args, size_t size) {
  if (header.arg_bytes < size) {
    static log::RateLimit short_arguments;
    log::Limited(short_arguments, log::Level::kDebug,
                 "FUSE request {} opcode {}: {} argument bytes, needs {}", request->state.unique,
                 header.opcode, header.arg_bytes, size);
    ReplyError(request, EINVAL);
    return false;
  }
  CopyFromIn(request, sizeof(struct fuse_in_header), args, size);
  return true;
}

bool Queue::RequireKind(Request* request, const Header& header, NodeKind wanted) {
  const NodeKind kind = session_->KindOf(header.node_id);
  if (kind == wanted) return true;
  if (kind == NodeKind::kNone) {
    ReplyError(request, ENOENT);
  } else {
    ReplyError(request, kind == NodeKind::kDirectory ? EISDIR : ENOTDIR);
  }
  return false;
}

bool Queue::RequireReplyRoom(Request* request, size_t payload_bytes) {
  if (request->state.out_bytes >= sizeof(struct fuse_out_header) + payload_bytes) return true;
  static log::RateLimit no_reply_room;
  log::Limited(no_reply_room, log::Level::kDebug,
               "FUSE request {} opcode {}: {} reply bytes do not fit in {}", request->state.unique,
               request->state.opcode, sizeof(struct fuse_out_header) + payload_bytes,
               request->state.out_bytes);
  ReplyError(request, EINVAL);
  return false;
}

void Queue::SubmitIo(Request* request, block::IoOp op, uint32_t flags, uint64_t offset,
                     uint64_t length) {
  RequestState& state = request->state;
  block::IoRequest& io = state.io;
  io.op = op;
  io.flags = flags;
  io.offset = offset;
  io.length = length;
  const bool has_data = op == block::IoOp::kRead || op == block::IoOp::kWrite;
  io.iov = has_data ? state.data_iov : nullptr;
  io.iovcnt = has_data ? state.data_iov_count : 0;
  io.done = &Queue::OnIoComplete;
  io.opaque = request;
  io.status_data = false;
  io_queue_->Submit(&io);
}

void Queue::OnIoComplete(block::IoRequest* io, int64_t result) {
  auto* request = static_cast<Request*>(io->opaque);
  Queue* queue = request->state.queue;
  switch (request->state.opcode) {
    case FUSE_READ:
      queue->OnReadDone(request, result);
      return;
    case FUSE_WRITE:
      queue->OnWriteDone(request, result);
      return;
    case FUSE_LSEEK:
      queue->OnBlockStatusDone(request, result);
      return;
    default:  // FSYNC, FALLOCATE: success carries no payload
      if (result < 0) {
        queue->ReplyIoError(request, result);
      } else {
        queue->Reply(request, nullptr, 0);
      }
      return;
  }
}

void Queue::ReplyError(Request* request, int error) {
  RequestState& state = request->state;
  if (state.out_bytes < sizeof(struct fuse_out_header)) {
    Finish(request, -ENOBUFS, true);
    return;
  }
  if (error <= 0 || error > 4095) error = EIO;  // never a success or a bogus errno by accident
  const struct fuse_out_header header { sizeof(header), -error, state.unique };
  CopyToOut(request, 0, &header, sizeof(header));
  Finish(request, sizeof(header), true);
}

void Queue::ReplyIoError(Request* request, int64_t result) {
  // Anything outside the errno range (a driver bug) becomes EIO, never a negated INT64_MIN.
  ReplyError(request, result < 0 && result >= -4095 ? static_cast<int>(-result) : EIO);
}

void Queue::Reply(Request* request, const void* payload, size_t payload_bytes) {
  if (!RequireReplyRoom(request, payload_bytes)) return;
  CopyToOut(request, sizeof(struct fuse_out_header), payload, payload_bytes);
  ReplyInPlace(request, payload_bytes);
}

void Queue::ReplyInPlace(Request* request, size_t payload_bytes) {
  const uint32_t length = static_cast<uint32_t>(sizeof(struct fuse_out_header) + payload_bytes);
  const struct fuse_out_header header { length, 0, request->state.unique };
  CopyToOut(request, 0, &header, sizeof(header));
  Finish(request, length, false);
}

void Queue::Finish(Request* request, int64_t result, bool failed) {
  const uint64_t elapsed_us = (MonotonicNs() - request->state.start_ns) / 1000;
  AddOnOwnerThread(stats_.latency_us[LatencyBucket(elapsed_us)], uint64_t{1});
  if (failed) AddOnOwnerThread(stats_.errors, uint64_t{1});
  AddOnOwnerThread(stats_.in_flight, ~uint32_t{0});  // minus one, modulo 2^32
  done_(request, result, context_);
}

}  // namespace bexd::fuse
