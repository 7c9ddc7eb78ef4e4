// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/file_worker.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "block/zero_buffer.h"
#include "util/align.h"

namespace bexd::block {
namespace {

using util::AlignDown;
using util::AlignUp;

constexpr size_t kBounceMinSize = size_t{1} << 20;

}  // namespace

bool FallocateNotSupported(int error) {
  return error == EOPNOTSUPP || error == ENOSYS || error == EINVAL || error == ENODEV;
}

FileWorker::FileWorker(std::shared_ptr<FileNode> node) : node_(std::move(node)), slice_(IOV_MAX) {}

FileWorker::~FileWorker() { free(bounce_); }

void FileWorker::Run(IoRequest* request) {
  FileRequestState* state = DriverState<FileRequestState>(request);
  state->result = node_->KernelResult(*request, Execute(request, state->done));
}

int64_t FileWorker::Execute(IoRequest* request, uint64_t done) {
  switch (request->op) {
    case IoOp::kRead:
      return Read(request, done);
    case IoOp::kWrite:
      return Write(request, done);
    case IoOp::kFlush:
      return fdatasync(node_->fd()) == 0 ? 0 : -errno;
    case IoOp::kDiscard:
      return Discard(*request);
    case IoOp::kWriteZeroes:
      return WriteZeroes(*request);
    case IoOp::kBlockStatus:
      return BlockStatus(request);
    case IoOp::kAllocate:
      return Allocate(*request);
  }
  return -EINVAL;
}

char* FileWorker::Bounce() {
  if (bounce_ != nullptr) return bounce_;
  size_t align = std::max<size_t>({node_->memory_align(), node_->offset_align(), 4096});
  size_t size = std::max<size_t>(kBounceMinSize, size_t{2} * node_->offset_align());
  void* memory = nullptr;
  if (posix_memalign(&memory, align, size) != 0) return nullptr;
  bounce_ = static_cast<char*>(memory);
  bounce_size_ = size;
  return bounce_;
}

int64_t FileWorker::Read(IoRequest* request, uint64_t done) {
  while (done < request->length) {
    uint64_t offset = request->offset + done;
    uint64_t length = request->length - done;
    int count = SliceIov(request->iov, request->iovcnt, done, slice_.data());
    if (!node_->IsAligned(offset, length, slice_.data(), count)) {
      int error = BounceRead(offset, length, IovCursor(request->iov, request->iovcnt, done));
      return error != 0 ? error : static_cast<int64_t>(request->length);
    }
    ssize_t n = preadv(node_->fd(), slice_.data(), count, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) {
      // Past the end of the file (shorter than the node, e.g. truncated by someone else).
      ZeroIovFrom(request->iov, request->iovcnt, done);
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  return static_cast<int64_t>(request->length);
}

int64_t FileWorker::Write(IoRequest* request, uint64_t done) {
  int rw_flags = (request->flags & kIoFua) ? RWF_DSYNC : 0;
  while (done < request->length) {
    uint64_t offset = request->offset + done;
    uint64_t length = request->length - done;
    int count = SliceIov(request->iov, request->iovcnt, done, slice_.data());
    if (!node_->IsAligned(offset, length, slice_.data(), count)) {
      IovCursor cursor(request->iov, request->iovcnt, done);
      int error = BounceWrite(offset, length, Source{&cursor}, rw_flags);
      return error != 0 ? error : static_cast<int64_t>(request->length);
    }
    ssize_t n = pwritev2(node_->fd(), slice_.data(), count, static_cast<off_t>(offset), rw_flags);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) return -EIO;
    done += static_cast<uint64_t>(n);
  }
  return static_cast<int64_t>(request->length);
}

int FileWorker::ReadFully(char* buffer, uint64_t offset, uint64_t length) {
  uint64_t done = 0;
  while (done < length) {
    ssize_t n = pread(node_->fd(), buffer + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
    // Under O_DIRECT only the end of the file cuts a read inside a block.
    if (node_->direct() && done % node_->offset_align() != 0) break;
  }
  std::memset(buffer + done, 0, length - done);
  return 0;
}

int FileWorker::WriteFully(const char* buffer, uint64_t offset, uint64_t length, int rw_flags) {
  uint64_t done = 0;
  while (done < length) {
    struct iovec iov = {const_cast<char*>(buffer + done), length - done};
    ssize_t n = pwritev2(node_->fd(), &iov, 1, static_cast<off_t>(offset + done), rw_flags);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) return -EIO;
    done += static_cast<uint64_t>(n);
  }
  return 0;
}

int FileWorker::BounceRead(uint64_t offset, uint64_t length, IovCursor cursor) {
  char* bounce = Bounce();
  if (bounce == nullptr) return -ENOMEM;
  const uint64_t align = node_->offset_align();
  const uint64_t end = offset + length;
  uint64_t position = offset;
  while (position < end) {
    uint64_t start = AlignDown(position, align);
    uint64_t stop = std::min(AlignUp(end, align), start + bounce_size_);
    if (int error = ReadFully(bounce, start, stop - start)) return error;
    uint64_t chunk = std::min(stop, end) - position;
    cursor.CopyIn(bounce + (position - start), chunk);
    position += chunk;
  }
  return 0;
}

int FileWorker::BounceWrite(uint64_t offset, uint64_t length, Source source, int rw_flags) {
  char* bounce = Bounce();
  if (bounce == nullptr) return -ENOMEM;
  const uint64_t align = node_->offset_align();
  const uint64_t end = offset + length;
  const uint64_t span_start = AlignDown(offset, align);
  const uint64_t span_end = AlignUp(end, align);
  RangeGuard guard(node_->rmw_lock(), span_start, span_end);
  uint64_t position = offset;
  while (position < end) {
    uint64_t start = AlignDown(position, align);
    uint64_t stop = std::min(span_end, start + bounce_size_);
    uint64_t data_end = std::min(stop, end);
    bool head_partial = position > start;
    bool tail_partial = data_end < stop;
    if (head_partial) {
      if (int error = ReadFully(bounce, start, align)) return error;
    }
    if (tail_partial && !(head_partial && stop - align == start)) {
      if (int error = ReadFully(bounce + (stop - align - start), stop - align, align)) return error;
    }
    char* data = bounce + (position - start);
    if (source.cursor != nullptr) {
      source.cursor->CopyOut(data, data_end - position);
    } else {
      std::memset(data, 0, data_end - position);
    }
    if (int error = WriteFully(bounce, start, stop - start, rw_flags)) return error;
    position = data_end;
  }
  // A partial last block of a file whose size is not a multiple of the alignment was written
  // whole; cut the file back so the node keeps its size.
  uint64_t size = node_->size();
  if (!node_->is_block_device() && span_end > size) {
    struct stat st;
    if (fstat(node_->fd(), &st) != 0) return -errno;
    if (static_cast<uint64_t>(st.st_size) > size &&
        ftruncate(node_->fd(), static_cast<off_t>(size)) != 0) {
      return -errno;
    }
  }
  return 0;
}

int64_t FileWorker::Allocate(const IoRequest& request) {
  // A block device's storage always exists (and fallocate mode 0 is not defined for it).
  if (node_->is_block_device()) return static_cast<int64_t>(request.length);
  while (fallocate(node_->fd(), 0, static_cast<off_t>(request.offset),
                   static_cast<off_t>(request.length)) != 0) {
    // Not emulated by writing zeroes: that would overwrite data. The caller learns what the
    // filesystem under the image says (EOPNOTSUPP, ENOSPC, ...).
    if (errno != EINTR) return -errno;
  }
  return static_cast<int64_t>(request.length);
}

int64_t FileWorker::Discard(const IoRequest& request) {
  int fd = node_->fd();
  if (node_->is_block_device()) {
    uint64_t sector = node_->logical_block_size();
    uint64_t start = AlignUp(request.offset, sector);
    uint64_t stop = AlignDown(request.offset + request.length, sector);
    if (start < stop) {
      uint64_t range[2] = {start, stop - start};
      if (ioctl(fd, BLKDISCARD, range) != 0 && errno != EOPNOTSUPP) return -errno;
    }
  } else if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                       static_cast<off_t>(request.offset),
                       static_cast<off_t>(request.length)) != 0) {
    // Discard is a hint: a filesystem without hole punching keeps the data.
    if (errno != EOPNOTSUPP) return -errno;
  }
  return static_cast<int64_t>(request.length);
}

int64_t FileWorker::WriteZeroes(const IoRequest& request) {
  int fd = node_->fd();
  auto offset = static_cast<off_t>(request.offset);
  auto length = static_cast<off_t>(request.length);
  if ((request.flags & kIoMayUnmap) && node_->options().discard == DiscardMode::kUnmap) {
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length) == 0) {
      return static_cast<int64_t>(request.length);
    }
    if (!FallocateNotSupported(errno)) return -errno;
  }
  if (fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, offset, length) == 0) {
    return static_cast<int64_t>(request.length);
  }
  if (!FallocateNotSupported(errno)) return -errno;
  int error = WriteZeroesByWriting(request.offset, request.length);
  return error != 0 ? error : static_cast<int64_t>(request.length);
}

int FileWorker::WriteZeroesByWriting(uint64_t offset, uint64_t length) {
  struct iovec zero_iov = {const_cast<char*>(ZeroBuffer()),
                           std::min<uint64_t>(length, kZeroBufferSize)};
  if (!node_->IsAligned(offset, length, &zero_iov, 1)) {
    return BounceWrite(offset, length, Source{nullptr}, 0);
  }
  // Aligned: whole chunks of the zero buffer keep every write aligned too.
  uint64_t done = 0;
  while (done < length) {
    uint64_t chunk = std::min<uint64_t>(length - done, kZeroBufferSize);
    if (int error = WriteFully(ZeroBuffer(), offset + done, chunk, 0)) return error;
    done += chunk;
  }
  return 0;
}

int64_t FileWorker::BlockStatus(IoRequest* request) {
  uint64_t size = node_->size();
  if (request->offset >= size || request->length == 0) return 0;
  uint64_t end = std::min(size, request->offset + std::min(request->length, size));
  auto extent = [request](uint64_t stop, bool data) {
    request->status_data = data;
    return static_cast<int64_t>(stop - request->offset);
  };
  if (node_->is_block_device()) return extent(end, true);
  off_t data = lseek(node_->fd(), static_cast<off_t>(request->offset), SEEK_DATA);
  if (data < 0) {
    // ENXIO: no data at or after offset. Anything else: the filesystem cannot tell; say data.
    return extent(end, errno != ENXIO);
  }
  if (static_cast<uint64_t>(data) > request->offset) {
    return extent(std::min<uint64_t>(end, static_cast<uint64_t>(data)), false);
  }
  off_t hole = lseek(node_->fd(), static_cast<off_t>(request->offset), SEEK_HOLE);
  if (hole < 0) return extent(end, true);
  return extent(std::min<uint64_t>(end, static_cast<uint64_t>(hole)), true);
}

}  // namespace bexd::block
