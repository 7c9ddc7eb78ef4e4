// SPDX-License-Identifier: GPL-2.0-or-later
// Qcow2Queue: turning a request into child requests (the fast path), and their completions.
#include <cerrno>
#include <cstring>

#include "block/iov_util.h"
#include "block/qcow2/iov_slice.h"
#include "block/qcow2/queue.h"

namespace bexd::block::qcow2 {
namespace {

// Compressed-cluster buffers per queue: enough to keep sequential reads of a compressed image
// busy, within about 16 MiB for the largest clusters.
uint32_t CompressedBufferCount(uint64_t cluster_size) {
  uint64_t count = (uint64_t{16} << 20) / (3 * cluster_size);
  return count < 1 ? 1 : count > 8 ? 8 : static_cast<uint32_t>(count);
}

}  // namespace

Qcow2Queue::SubRequest* Qcow2Queue::TakeSub() {
  SubRequest* sub = free_subs_;
  if (sub != nullptr) free_subs_ = sub->next_free;
  return sub;
}

void Qcow2Queue::ReleaseSub(SubRequest* sub) {
  if (sub->buffer != nullptr) {
    sub->buffer->next_free = free_buffers_;
    free_buffers_ = sub->buffer;
    sub->buffer = nullptr;
  }
  sub->next_free = free_subs_;
  free_subs_ = sub;
}

Qcow2Queue::CompressedBuffer* Qcow2Queue::TakeBuffer() {
  if (buffers_ == nullptr) {
    // First compressed cluster on this queue: set up the buffers once.
    buffer_count_ = CompressedBufferCount(geometry_.cluster_size);
    buffers_ = std::make_unique<CompressedBuffer[]>(buffer_count_);
    for (uint32_t i = 0; i < buffer_count_; ++i) {
      buffers_[i].in = std::make_unique<uint8_t[]>(2 * geometry_.cluster_size);
      buffers_[i].out = std::make_unique<uint8_t[]>(geometry_.cluster_size);
      buffers_[i].next_free = free_buffers_;
      free_buffers_ = &buffers_[i];
    }
    decompressor_ = std::make_unique<Decompressor>(image_->compression_type);
  }
  CompressedBuffer* buffer = free_buffers_;
  if (buffer != nullptr) free_buffers_ = buffer->next_free;
  return buffer;
}

void Qcow2Queue::Continue(IoRequest* request) {
  RequestState* state = StateOf(request);
  switch (request->op) {
    case IoOp::kRead:
    case IoOp::kWrite:
      if (!ContinueReadWrite(request)) {
        state->stalled = true;
        stalled_.PushBack(request);
        return;
      }
      break;
    case IoOp::kBlockStatus:
      ContinueBlockStatus(request);
      break;
    case IoOp::kFlush:
      if (!image_->metadata_clean.load(std::memory_order_acquire)) return ToEngine(request);
      if (!IssueChild(request, file_.get(), IoOp::kFlush, 0, 0, 0)) {
        state->stalled = true;
        stalled_.PushBack(request);
        return;
      }
      break;
    default:
      break;
  }
  MaybeComplete(request);
}

void Qcow2Queue::ResumeStalled() {
  while (!stalled_.empty() && free_subs_ != nullptr) {
    IoRequest* request = stalled_.PopFront();
    StateOf(request)->stalled = false;
    Continue(request);
    if (StateOf(request)->stalled) break;  // back at the end of the list; wait for more room
  }
}

bool Qcow2Queue::ContinueReadWrite(IoRequest* request) {
  RequestState* state = StateOf(request);
  const bool write = request->op == IoOp::kWrite;
  while (state->done < request->length) {
    uint64_t offset = request->offset + state->done;
    Extent extent = Map(offset, request->length - state->done, write, state->copy);
    switch (extent.kind) {
      case Kind::kMiss:
      case Kind::kEngine:
        ToEngine(request);
        return true;
      case Kind::kInvalid:
        ReportCorruption(offset);
        Fail(request, -EIO);
        return true;
      case Kind::kZero:
        IovCursor(request->iov, request->iovcnt, state->done).Zero(extent.length);
        state->done += extent.length;
        break;
      case Kind::kBacking: {
        uint64_t backing_size = image_->backing->size();
        if (offset >= backing_size) {
          // A backing file shorter than the image reads as zeroes past its end.
          IovCursor(request->iov, request->iovcnt, state->done).Zero(extent.length);
          state->done += extent.length;
          break;
        }
        uint64_t length = extent.length;
        if (length > backing_size - offset) length = backing_size - offset;
        if (!IssueChild(request, backing_.get(), IoOp::kRead, offset, length, 0)) return false;
        break;
      }
      case Kind::kData: {
        uint64_t file_size = image_->file->size();
        if (geometry_.cluster_floor(extent.host) >= file_size) {
          ReportCorruption(offset);
          Fail(request, -EIO);
          return true;
        }
        uint64_t in_file = extent.host < file_size ? file_size - extent.host : 0;
        if (!write) {
          uint64_t length = extent.length < in_file ? extent.length : in_file;
          if (length > 0 &&
              !IssueChild(request, file_.get(), IoOp::kRead, extent.host, length, 0)) {
            return false;
          }
          // The image file may end inside its last cluster; the rest reads as zeroes.
          IovCursor(request->iov, request->iovcnt, state->done).Zero(extent.length - length);
          state->done += extent.length - length;
          break;
        }
        bool fua = (request->flags & kIoFua) != 0;
        if (extent.length > in_file ||
            (fua && !image_->metadata_clean.load(std::memory_order_acquire))) {
          // Needs the file grown, or the mapping made durable along with the data.
          ToEngine(request);
          return true;
        }
        if (!IssueChild(request, file_.get(), IoOp::kWrite, extent.host, extent.length,
                        fua ? uint32_t{kIoFua} : 0)) {
          return false;
        }
        break;
      }
      case Kind::kCompressed:
        if (!IssueCompressed(request, extent.host, extent.length)) return false;
        break;
    }
  }
  return true;
}

void Qcow2Queue::ContinueBlockStatus(IoRequest* request) {
  RequestState* state = StateOf(request);
  uint64_t size = image_->size.load(std::memory_order_acquire);
  state->done = request->length;
  if (request->offset >= size) {
    state->status_length = 0;
    return;
  }
  uint64_t max = size - request->offset;
  if (max > request->length) max = request->length;
  Extent extent = Map(request->offset, max, false, state->copy);
  auto is_data = [](Kind kind) { return kind == Kind::kData || kind == Kind::kCompressed; };
  switch (extent.kind) {
    case Kind::kMiss:
      state->done = 0;
      ToEngine(request);
      return;
    case Kind::kInvalid:
      ReportCorruption(request->offset);
      Fail(request, -EIO);
      return;
    case Kind::kBacking: {
      uint64_t backing_size = image_->backing->size();
      if (request->offset < backing_size) {
        uint64_t length = extent.length;
        if (length > backing_size - request->offset) length = backing_size - request->offset;
        state->done = 0;
        if (!IssueChild(request, backing_.get(), IoOp::kBlockStatus, request->offset, length, 0)) {
          state->stalled = true;
          stalled_.PushBack(request);
        }
        state->done = request->length;
        state->status_length = extent.length;  // if the backing node reports nothing
        return;
      }
      request->status_data = false;
      state->status_length = extent.length;
      return;
    }
    default:
      break;
  }
  // Extend over following extents with the same status.
  bool data = is_data(extent.kind);
  uint64_t length = extent.length;
  while (length < max) {
    Extent next = Map(request->offset + length, max - length, false, state->copy);
    bool next_data = is_data(next.kind);
    if (next.kind == Kind::kMiss || next.kind == Kind::kInvalid || next.kind == Kind::kBacking ||
        next_data != data) {
      break;
    }
    length += next.length;
  }
  request->status_data = data;
  state->status_length = length;
}

bool Qcow2Queue::IssueChild(IoRequest* parent, IoQueue* child, IoOp op, uint64_t child_offset,
                            uint64_t length, uint32_t flags) {
  RequestState* state = StateOf(parent);
  bool has_data = op == IoOp::kRead || op == IoOp::kWrite;
  do {
    SubRequest* sub = TakeSub();
    if (sub == nullptr) return false;
    IovSlice slice;
    if (has_data) {
      slice = SliceRange(parent->iov, parent->iovcnt, state->done, length, sub->iov, kSubIovs);
    } else {
      slice.bytes = length;
    }
    sub->io = IoRequest();
    sub->io.op = op;
    sub->io.flags = flags;
    sub->io.offset = child_offset;
    sub->io.length = slice.bytes;
    sub->io.iov = slice.iov;
    sub->io.iovcnt = slice.count;
    sub->io.done = &OnChildDone;
    sub->io.opaque = sub;
    sub->parent = parent;
    ++state->pending;
    children_submitted_ = true;
    child->Submit(&sub->io);
    if (has_data) state->done += slice.bytes;
    child_offset += slice.bytes;
    length -= slice.bytes;
  } while (length > 0);
  return true;
}

bool Qcow2Queue::IssueCompressed(IoRequest* parent, uint64_t entry, uint64_t length) {
  RequestState* state = StateOf(parent);
  CompressedExtent extent = DecodeCompressed(geometry_, entry);
  uint64_t file_size = image_->file->size();
  if (extent.offset >= file_size) {
    Fail(parent, -EIO);  // QEMU reads zeroes there, which never decompress
    return true;
  }
  // The last compressed cluster may end inside the file's last sector.
  uint64_t read_length = extent.size;
  if (read_length > file_size - extent.offset) read_length = file_size - extent.offset;
  if (free_subs_ == nullptr) return false;
  CompressedBuffer* buffer = TakeBuffer();
  if (buffer == nullptr) return false;
  SubRequest* sub = TakeSub();
  sub->buffer = buffer;
  sub->iov[0].iov_base = buffer->in.get();
  sub->iov[0].iov_len = read_length;
  sub->io = IoRequest();
  sub->io.op = IoOp::kRead;
  sub->io.offset = extent.offset;
  sub->io.length = read_length;
  sub->io.iov = sub->iov;
  sub->io.iovcnt = 1;
  sub->io.done = &OnChildDone;
  sub->io.opaque = sub;
  sub->parent = parent;
  sub->parent_position = state->done;
  sub->cluster_skip = geometry_.offset_in_cluster(parent->offset + state->done);
  sub->copy_length = length;
  ++state->pending;
  children_submitted_ = true;
  file_->Submit(&sub->io);
  state->done += length;
  return true;
}

void Qcow2Queue::OnChildDone(IoRequest* io, int64_t result) {
  auto* sub = static_cast<SubRequest*>(io->opaque);
  sub->queue->ChildDone(sub, result);
}

void Qcow2Queue::ChildDone(SubRequest* sub, int64_t result) {
  IoRequest* parent = sub->parent;
  RequestState* state = StateOf(parent);
  int64_t error = 0;
  switch (sub->io.op) {
    case IoOp::kBlockStatus:
      if (result < 0) {
        error = result;
      } else if (result > 0) {
        state->status_length = static_cast<uint64_t>(result);
        parent->status_data = sub->io.status_data;
      } else {
        parent->status_data = false;  // past the backing node's end: zeroes
      }
      break;
    case IoOp::kFlush:
      if (result < 0) error = result;
      break;
    default:
      if (result < 0) {
        error = result;
      } else if (static_cast<uint64_t>(result) != sub->io.length) {
        error = -EIO;
      } else if (sub->buffer != nullptr) {
        FinishCompressed(sub, parent);
      }
      break;
  }
  if (error != 0 && state->error == 0) state->error = error;
  ReleaseSub(sub);
  --state->pending;
  MaybeComplete(parent);
}

void Qcow2Queue::FinishCompressed(SubRequest* sub, IoRequest* parent) {
  CompressedBuffer* buffer = sub->buffer;
  if (!decompressor_->Decompress(buffer->in.get(), sub->io.length, buffer->out.get(),
                                 geometry_.cluster_size)) {
    RequestState* state = StateOf(parent);
    if (state->error == 0) state->error = -EIO;
    return;
  }
  IovCursor(parent->iov, parent->iovcnt, sub->parent_position)
      .CopyIn(buffer->out.get() + sub->cluster_skip, sub->copy_length);
}

}  // namespace bexd::block::qcow2
