// The file's opcodes: OPEN, RELEASE, READ, WRITE, FLUSH, FSYNC, FALLOCATE, LSEEK.
#include <fcntl.h>
#include <linux/falloc.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "fuse/queue.h"
#include "fuse/scatter_gather.h"
#include "fuse/status_errno.h"
#include "util/rate_limit.h"

namespace bexd::fuse {
namespace {

// The handle OPEN hands out. There is one file, so the handle carries no state; RELEASE checks it
// so that a stray RELEASE cannot drop someone else's open count.
constexpr uint64_t kFileHandle = 1;
constexpr uint64_t kMaxOffset = INT64_MAX;  // loff_t is signed

constexpr size_t kWriteDataOffset = sizeof(struct fuse_in_header) + sizeof(struct fuse_write_in);
constexpr size_t kReadDataOffset = sizeof(struct fuse_out_header);

// [offset, offset+length) stays within what a file offset can address.
bool RangeFits(uint64_t offset, uint64_t length) {
  return offset <= kMaxOffset && length <= kMaxOffset - offset;
}

}  // namespace

void Queue::HandleOpen(Request* request, const Header& header) {
  struct fuse_open_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kFile)) return;
  // O_TRUNC reaches us because INIT negotiated FUSE_ATOMIC_O_TRUNC; it asks to modify the file
  // even with O_RDONLY.
  const bool truncate = in.flags & O_TRUNC;
  if (((in.flags & O_ACCMODE) != O_RDONLY || truncate) && !session_->options().writable) {
    ReplyError(request, EROFS);
    return;
  }
  if (!RequireReplyRoom(request, sizeof(struct fuse_open_out))) return;
  // `cp`, `dd` and `>` open with O_TRUNC. A growable export's size follows what is written, so
  // it is emptied; a fixed-size one is a disk whose size is not the writer's to change, so it
  // keeps its size and data and the writes that follow overwrite it from the start (as QSD).
  if (truncate && session_->options().growable) {
    if (absl::Status status = session_->Resize(0); !status.ok()) {
      static log::RateLimit failed;
      log::Limited(failed, log::Level::kWarn, "FUSE OPEN: truncating node '{}' failed: {}",
                   session_->node().node_name(), status.ToString());
      ReplyError(request, ErrnoOf(status));
      return;
    }
  }
  session_->HandleOpened();
  struct fuse_open_out out;
  std::memset(&out, 0, sizeof(out));
  out.fh = kFileHandle;
  // Every read and write goes to the block node (no page cache to keep coherent), and writes to
  // the one file may run concurrently instead of serialising on the inode lock.
  out.open_flags = FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES;
  Reply(request, out);
}

void Queue::HandleRelease(Request* request, const Header& header) {
  struct fuse_release_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kFile)) return;
  if (in.fh != kFileHandle) {
    ReplyError(request, EBADF);
    return;
  }
  if (!RequireReplyRoom(request, 0)) return;
  session_->HandleReleased();
  Reply(request, nullptr, 0);
}

void Queue::HandleRead(Request* request, const Header& header) {
  struct fuse_read_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kFile)) return;
  if (in.size > session_->options().max_write || !RangeFits(in.offset, in.size)) {
    static log::RateLimit read_out_of_range;
    log::Limited(read_out_of_range, log::Level::kDebug,
                 "FUSE READ of {} bytes at {} is out of range", in.size, in.offset);
    ReplyError(request, EINVAL);
    return;
  }
  if (!RequireReplyRoom(request, in.size)) return;

  const uint64_t size = session_->node().size();
  const uint32_t length =
      in.offset >= size ? 0 : static_cast<uint32_t>(std::min<uint64_t>(in.size, size - in.offset));
  if (length == 0) {
    ReplyInPlace(request, 0);  // at or past the end
    return;
  }
  RequestState& state = request->state;
  state.data_iov_count = WindowOf(request->out, request->out_count, kReadDataOffset, length,
                                  state.data_iov, kMaxDataIovecs);
  if (state.data_iov_count < 0) {
    static log::RateLimit read_split;
    log::Limited(read_split, log::Level::kDebug,
                 "FUSE READ reply buffers are split into more than {} pieces", kMaxDataIovecs);
    ReplyError(request, EINVAL);
    return;
  }
  state.length = length;
  SubmitIo(request, block::IoOp::kRead, 0, in.offset, length);
}

void Queue::OnReadDone(Request* request, int64_t result) {
  if (result < 0) {
    ReplyIoError(request, result);
    return;
  }
  const uint64_t bytes = std::min<uint64_t>(result, request->state.length);
  AddOnOwnerThread(stats_.bytes_read, bytes);
  ReplyInPlace(request, bytes);
}

void Queue::HandleWrite(Request* request, const Header& header) {
  struct fuse_write_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kFile)) return;
  if (header.arg_bytes - sizeof(in) != in.size) {
    static log::RateLimit write_size_mismatch;
    log::Limited(write_size_mismatch, log::Level::kDebug, "FUSE WRITE of {} bytes carries {}",
                 in.size, header.arg_bytes - sizeof(in));
    ReplyError(request, EINVAL);
    return;
  }
  if (in.size > session_->options().max_write || !RangeFits(in.offset, in.size)) {
    static log::RateLimit write_out_of_range;
    log::Limited(write_out_of_range, log::Level::kDebug,
                 "FUSE WRITE of {} bytes at {} is out of range", in.size, in.offset);
    ReplyError(request, EINVAL);
    return;
  }
  if (!session_->options().writable) {
    ReplyError(request, EROFS);
    return;
  }
  if (!RequireReplyRoom(request, sizeof(struct fuse_write_out))) return;

  uint64_t size = session_->node().size();
  uint32_t length = in.size;
  if (in.offset + length > size) {
    if (session_->options().growable) {
      if (absl::Status status = session_->GrowTo(in.offset + length); !status.ok()) {
        static log::RateLimit failed;
        log::Limited(failed, log::Level::kWarn, "FUSE WRITE: growing node '{}' to {} failed: {}",
                     session_->node().node_name(), in.offset + length, status.ToString());
        ReplyError(request, ErrnoOf(status));
        return;
      }
    } else if (in.offset >= size) {
      ReplyError(request, ENOSPC);  // like a block device: nothing fits past the end
      return;
    } else {
      length = static_cast<uint32_t>(size - in.offset);  // a short write up to the end
    }
  }
  RequestState& state = request->state;
  state.length = length;
  if (length == 0) {
    OnWriteDone(request, 0);
    return;
  }
  state.data_iov_count = WindowOf(request->in, request->in_count, kWriteDataOffset, length,
                                  state.data_iov, kMaxDataIovecs);
  if (state.data_iov_count < 0) {
    static log::RateLimit write_split;
    log::Limited(write_split, log::Level::kDebug,
                 "FUSE WRITE data is split into more than {} pieces", kMaxDataIovecs);
    ReplyError(request, EINVAL);
    return;
  }
  // O_SYNC and O_DSYNC opens (their flags ride along in the request) get the same durability as
  // a writethrough export.
  const bool durable = session_->options().writethrough || (in.flags & O_DSYNC);
  SubmitIo(request, block::IoOp::kWrite, durable ? uint32_t{block::kIoFua} : 0u, in.offset, length);
}

void Queue::OnWriteDone(Request* request, int64_t result) {
  if (result < 0) {
    ReplyIoError(request, result);
    return;
  }
  struct fuse_write_out out;
  std::memset(&out, 0, sizeof(out));
  out.size = static_cast<uint32_t>(std::min<uint64_t>(result, request->state.length));
  AddOnOwnerThread(stats_.bytes_written, uint64_t{out.size});
  Reply(request, out);
}

void Queue::HandleFlush(Request* request, const Header& header) {
  struct fuse_flush_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kFile)) return;
  // close() flushes nothing: every WRITE already reached the block node, and durability is
  // FSYNC's job (or writethrough's).
  Reply(request, nullptr, 0);
}

void Queue::HandleFsync(Request* request, const Header& header) {
  struct fuse_fsync_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kFile)) return;
  if (!RequireReplyRoom(request, 0)) return;
  if (!session_->options().writable) {
    Reply(request, nullptr, 0);  // nothing was written through this export
    return;
  }
  SubmitIo(request, block::IoOp::kFlush, 0, 0, 0);
}

void Queue::HandleFallocate(Request* request, const Header& header) {
  struct fuse_fallocate_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kFile)) return;
  constexpr uint32_t kKnownModes =
      FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
  const bool punch = in.mode & FALLOC_FL_PUNCH_HOLE;
  const bool zero = in.mode & FALLOC_FL_ZERO_RANGE;
  const bool keep_size = in.mode & FALLOC_FL_KEEP_SIZE;
  if ((in.mode & ~kKnownModes) || (punch && zero) || (punch && !keep_size)) {
    ReplyError(request, EOPNOTSUPP);  // what vfs_fallocate() answers for these combinations
    return;
  }
  if (in.length == 0) {
    ReplyError(request, EINVAL);
    return;
  }
  if (!RangeFits(in.offset, in.length)) {
    ReplyError(request, EFBIG);
    return;
  }
  if (!session_->options().writable) {
    ReplyError(request, EROFS);
    return;
  }
  if (!RequireReplyRoom(request, 0)) return;

  const uint64_t end = in.offset + in.length;
  uint64_t size = session_->node().size();
  if (!keep_size && end > size) {
    // An explicit size change, like truncate (as QSD grows a writable export here). Where size
    // changes need `growable` (virtio-fs), a fixed-size disk has no room past its end: ENOSPC, as
    // for a WRITE there.
    if (!session_->resizable()) {
      ReplyError(request, ENOSPC);
      return;
    }
    if (absl::Status status = session_->GrowTo(end); !status.ok()) {
      static log::RateLimit failed;
      log::Limited(failed, log::Level::kWarn, "FUSE FALLOCATE: growing node '{}' to {} failed: {}",
                   session_->node().node_name(), end, status.ToString());
      ReplyError(request, ErrnoOf(status));
      return;
    }
    size = session_->node().size();
  }
  const uint64_t range_end = std::min(end, size);
  if (in.offset >= range_end) {
    Reply(request, nullptr, 0);  // KEEP_SIZE wholly past the end: nothing of the node to touch
    return;
  }
  if (!(punch || zero)) {
    // Plain allocation: the caller wants the space reserved now (ENOSPC now rather than on a
    // later write), so the driver reserves it in the backing storage.
    SubmitIo(request, block::IoOp::kAllocate, 0, in.offset, range_end - in.offset);
    return;
  }
  // A punched hole must read back as zeroes, which kDiscard does not promise: write zeroes and let
  // the driver deallocate.
  SubmitIo(request, block::IoOp::kWriteZeroes, punch ? uint32_t{block::kIoMayUnmap} : 0u, in.offset,
           range_end - in.offset);
}

void Queue::HandleLseek(Request* request, const Header& header) {
  struct fuse_lseek_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kFile)) return;
  if (!RequireReplyRoom(request, sizeof(struct fuse_lseek_out))) return;
  const uint64_t size = session_->node().size();
  struct fuse_lseek_out out;
  std::memset(&out, 0, sizeof(out));
  switch (in.whence) {
    case SEEK_SET:
      if (in.offset > kMaxOffset) break;
      out.offset = in.offset;
      Reply(request, out);
      return;
    case SEEK_END: {
      const int64_t delta = static_cast<int64_t>(in.offset);
      if ((delta < 0 && static_cast<uint64_t>(-(delta + 1)) >= size) ||
          (delta > 0 && static_cast<uint64_t>(delta) > kMaxOffset - size)) {
        break;
      }
      out.offset = size + delta;
      Reply(request, out);
      return;
    }
    case SEEK_DATA:
    case SEEK_HOLE:
      if (in.offset >= size) {
        ReplyError(request, ENXIO);
        return;
      }
      request->state.length = in.whence;
      request->state.seek_position = in.offset;
      SubmitBlockStatus(request);
      return;
    default:  // SEEK_CUR: the position lives in the kernel, which never asks
      break;
  }
  ReplyError(request, EINVAL);
}

void Queue::SubmitBlockStatus(Request* request) {
  const uint64_t position = request->state.seek_position;
  SubmitIo(request, block::IoOp::kBlockStatus, 0, position, session_->node().size() - position);
}

void Queue::OnBlockStatusDone(Request* request, int64_t result) {
  RequestState& state = request->state;
  if (result < 0) {
    ReplyIoError(request, result);
    return;
  }
  const bool want_data = state.length == SEEK_DATA;
  const uint64_t size = session_->node().size();
  if (result > 0 && state.io.status_data == want_data) {
    struct fuse_lseek_out out {
      state.seek_position
    };
    Reply(request, out);
    return;
  }
  state.seek_position += static_cast<uint64_t>(result);
  if (result == 0 || state.seek_position >= size) {
    if (want_data) {
      ReplyError(request, ENXIO);
    } else {
      struct fuse_lseek_out out {
        std::min(state.seek_position, size)
      };  // the hole at the end
      Reply(request, out);
    }
    return;
  }
  SubmitBlockStatus(request);
}

}  // namespace bexd::fuse
