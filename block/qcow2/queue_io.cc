// SPDX-License-Identifier: GPL-2.0-or-later
// Qcow2Queue: turning a request into child requests (the fast path), and their completions.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "block/iov_util.h"
#include "block/qcow2/iov_slice.h"
#include "block/qcow2/queue.h"

namespace bexd::block::qcow2 {
namespace {

// Compressed-cluster buffers per queue: enough for reads of a few clusters at once and to keep the
// last few inflated, within about 16 MiB for the largest clusters.
uint32_t CompressedBufferCount(uint64_t cluster_size) {
  uint64_t count = (uint64_t{16} << 20) / (3 * cluster_size);
  return count < 1 ? 1 : count > 8 ? 8 : static_cast<uint32_t>(count);
}

}  // namespace

Qcow2Queue::SubRequest* Qcow2Queue::TakeSub() {
  SubRequest* sub = free_subs_;
  if (sub != nullptr) free_subs_ = sub->next;
  return sub;
}

void Qcow2Queue::ReleaseSub(SubRequest* sub) {
  sub->next = free_subs_;
  free_subs_ = sub;
}

Qcow2Queue::CompressedBuffer* Qcow2Queue::FindBuffer(uint64_t entry) {
  for (uint32_t i = 0; i < buffer_count_; ++i) {
    if (buffers_[i].entry == entry) return &buffers_[i];
  }
  return nullptr;
}

Qcow2Queue::CompressedBuffer* Qcow2Queue::ClaimBuffer() {
  if (buffers_ == nullptr) {
    // First compressed cluster on this queue: set up the buffers once.
    uint32_t count = CompressedBufferCount(geometry_.cluster_size);
    uint64_t memory_align = std::max<uint64_t>(file_alignment_, 4096);
    uint64_t stride = 2 * geometry_.cluster_size + 2 * file_alignment_;
    stride = (stride + memory_align - 1) / memory_align * memory_align;
    void* memory = nullptr;
    if (posix_memalign(&memory, memory_align, count * stride) != 0) return nullptr;
    compressed_memory_.reset(static_cast<uint8_t*>(memory));
    buffers_ = std::make_unique<CompressedBuffer[]>(count);
    for (uint32_t i = 0; i < count; ++i) {
      buffers_[i].in = compressed_memory_.get() + i * stride;
      buffers_[i].out = std::make_unique<uint8_t[]>(geometry_.cluster_size);
    }
    buffer_count_ = count;
    decompressor_ = std::make_unique<Decompressor>(image_->compression_type);
  }
  CompressedBuffer* oldest = nullptr;
  for (uint32_t i = 0; i < buffer_count_; ++i) {
    CompressedBuffer& buffer = buffers_[i];
    if (buffer.filling) continue;
    if (buffer.entry == 0) return &buffer;
    if (oldest == nullptr || buffer.last_use < oldest->last_use) oldest = &buffer;
  }
  return oldest;
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
      if (image_->flush_failed.load(std::memory_order_acquire) != 0) {
        state->error = -EIO;
        break;
      }
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
        if (write) {
          WriteThroughEngine(request, offset);
        } else {
          ToEngine(request);
        }
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

void Qcow2Queue::WriteThroughEngine(IoRequest* request, uint64_t offset) {
  RequestState* state = StateOf(request);
  uint64_t cluster = offset >> geometry_.cluster_bits;
  int free_entry = -1;
  for (int i = 0; i < kAllocatingWrites; ++i) {
    AllocatingWrite& entry = allocating_[i];
    if (entry.writer == nullptr) {
      if (free_entry < 0) free_entry = i;
    } else if (cluster >= entry.first_cluster && cluster < entry.end_cluster) {
      // When that write is back the cluster is allocated and this one can write in place (or,
      // if it failed, goes to the engine itself).
      state->waits_for_allocation = true;
      entry.waiters.PushBack(request);
      return;
    }
  }
  if (free_entry >= 0) {
    AllocatingWrite& entry = allocating_[free_entry];
    entry.writer = request;
    entry.first_cluster = cluster;
    entry.end_cluster = ((request->offset + request->length - 1) >> geometry_.cluster_bits) + 1;
    state->allocating = static_cast<int8_t>(free_entry);
  }
  ToEngine(request);
}

void Qcow2Queue::AllocationLanded(IoRequest* writer) {
  RequestState* state = StateOf(writer);
  AllocatingWrite& entry = allocating_[state->allocating];
  state->allocating = -1;
  entry.writer = nullptr;
  RequestList waiters;
  waiters.Splice(entry.waiters);
  while (IoRequest* request = waiters.PopFront()) {
    StateOf(request)->waits_for_allocation = false;
    Continue(request);
  }
}

bool Qcow2Queue::IssueCompressed(IoRequest* parent, uint64_t entry, uint64_t length) {
  RequestState* state = StateOf(parent);
  const uint64_t skip = geometry_.offset_in_cluster(parent->offset + state->done);
  CompressedBuffer* buffer = FindBuffer(entry);
  if (buffer != nullptr && !buffer->filling) {
    buffer->last_use = ++buffer_clock_;
    IovCursor(parent->iov, parent->iovcnt, state->done).CopyIn(buffer->out.get() + skip, length);
    state->done += length;
    return true;
  }
  if (free_subs_ == nullptr) return false;
  CompressedExtent extent = DecodeCompressed(geometry_, entry);
  uint64_t file_size = image_->file->size();
  uint64_t read_length = 0;
  if (buffer == nullptr) {
    if (extent.offset >= file_size) {
      Fail(parent, -EIO);  // QEMU reads zeroes there, which never decompress
      return true;
    }
    // The last compressed cluster may end inside the file's last sector.
    read_length = extent.size;
    if (read_length > file_size - extent.offset) read_length = file_size - extent.offset;
    buffer = ClaimBuffer();
    if (buffer == nullptr && buffers_ == nullptr) {
      Fail(parent, -ENOMEM);
      return true;
    }
    if (buffer == nullptr) return false;  // every buffer is filling: wait for one
  }
  SubRequest* sub = TakeSub();
  sub->parent = parent;
  sub->parent_position = state->done;
  sub->cluster_skip = skip;
  sub->copy_length = length;
  ++state->pending;
  state->done += length;
  if (buffer->filling) {
    sub->next = buffer->waiters;
    buffer->waiters = sub;
    return true;
  }
  // Whole blocks of the file child around the compressed bytes (up to the end of the file), so
  // that O_DIRECT reads them without a bounce buffer.
  uint64_t start = extent.offset / file_alignment_ * file_alignment_;
  uint64_t end =
      (extent.offset + read_length + file_alignment_ - 1) / file_alignment_ * file_alignment_;
  end = std::min(end, file_size);
  buffer->entry = entry;
  buffer->filling = true;
  buffer->data_skip = extent.offset - start;
  buffer->data_length = read_length;
  sub->buffer = buffer;
  sub->iov[0].iov_base = buffer->in;
  sub->iov[0].iov_len = end - start;
  sub->io = IoRequest();
  sub->io.op = IoOp::kRead;
  sub->io.offset = start;
  sub->io.length = end - start;
  sub->io.iov = sub->iov;
  sub->io.iovcnt = 1;
  sub->io.done = &OnChildDone;
  sub->io.opaque = sub;
  children_submitted_ = true;
  file_->Submit(&sub->io);
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
      if (result < 0) {
        error = result;
        image_->NoteFlushFailed(static_cast<int>(-result));
      }
      break;
    default:
      if (sub->buffer != nullptr) {
        error = FinishCompressed(sub, result);
      } else if (result < 0) {
        error = result;
        if ((sub->io.flags & kIoFua) != 0) image_->NoteFlushFailed(static_cast<int>(-result));
      } else if (static_cast<uint64_t>(result) != sub->io.length) {
        error = -EIO;
      }
      break;
  }
  if (error != 0 && state->error == 0) state->error = error;
  ReleaseSub(sub);
  --state->pending;
  MaybeComplete(parent);
}

int64_t Qcow2Queue::FinishCompressed(SubRequest* sub, int64_t result) {
  CompressedBuffer* buffer = sub->buffer;
  sub->buffer = nullptr;
  buffer->filling = false;
  int64_t error = result < 0 ? result : 0;
  if (error == 0 && static_cast<uint64_t>(result) < buffer->data_skip + buffer->data_length) {
    error = -EIO;
  }
  if (error == 0 && !decompressor_->Decompress(buffer->in + buffer->data_skip, buffer->data_length,
                                               buffer->out.get(), geometry_.cluster_size)) {
    error = -EIO;
  }
  if (error == 0) {
    buffer->last_use = ++buffer_clock_;
    CopyCompressed(sub, *buffer);
  } else {
    buffer->entry = 0;  // the next read of the cluster tries again
  }
  SubRequest* waiter = std::exchange(buffer->waiters, nullptr);
  while (waiter != nullptr) {
    SubRequest* next = waiter->next;
    IoRequest* parent = waiter->parent;
    RequestState* state = StateOf(parent);
    if (error == 0) {
      CopyCompressed(waiter, *buffer);
    } else if (state->error == 0) {
      state->error = error;
    }
    ReleaseSub(waiter);
    --state->pending;
    MaybeComplete(parent);
    waiter = next;
  }
  return error;
}

void Qcow2Queue::CopyCompressed(SubRequest* part, const CompressedBuffer& buffer) {
  IovCursor(part->parent->iov, part->parent->iovcnt, part->parent_position)
      .CopyIn(buffer.out.get() + part->cluster_skip, part->copy_length);
}

}  // namespace bexd::block::qcow2
