// SPDX-License-Identifier: GPL-2.0-or-later
// A request's scatter-gather buffers come from an untrusted client. The core reads them with a
// Reader and fills the reply with a Writer, as virtiofsd's descriptor_utils does: each takes
// objects of a type from the front, or splits off the data part as iovecs for the block layer
// (no copy). Neither ever reads or writes past the end of its buffers, nor modifies the iovecs.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

namespace bexd::fuse {

// Sum of the iovec lengths; false if `count` is negative, an iovec array is missing, or the sum
// overflows. The Reader and Writer take the validated total.
bool TotalBytes(const struct iovec* iov, int count, size_t* total);

// A position in a scatter-gather list and the bytes left from it. Reader and Writer are this with
// the copies pointed one way.
class BufferCursor {
 public:
  BufferCursor() = default;
  // `bytes` is the list's total (TotalBytes).
  BufferCursor(const struct iovec* iov, int count, size_t bytes)
      : iov_(count > 0 ? iov : nullptr), remaining_(bytes) {}

  size_t remaining() const { return remaining_; }
  // Forgets everything past the next `bytes` (no effect if fewer remain).
  void Limit(size_t bytes) {
    if (bytes < remaining_) remaining_ = bytes;
  }
  // Moves past `n` bytes; false, and no move, if fewer remain.
  bool Skip(size_t n);
  // The next `n` bytes as a cursor of their own, and moves this one past them. Asks for no more
  // than remaining().
  BufferCursor Split(size_t n);
  // Describes the next `n` bytes as at most `capacity` iovecs in `window` and moves past them.
  // Returns the count, or -1 (and no move) if fewer bytes remain or more iovecs would be needed.
  int SplitIovecs(size_t n, struct iovec* window, int capacity);
  // Copies the next `n` bytes out of, or into, the buffers and moves past them; n <= remaining().
  void CopyOut(void* destination, size_t n);
  void CopyIn(const void* source, size_t n);

 private:
  // Calls fn(piece, length) for each piece of the next `n` bytes and moves past them.
  template <typename Fn>
  void Walk(size_t n, Fn&& fn);

  const struct iovec* iov_ = nullptr;  // the iovec holding the next byte
  size_t within_ = 0;                  // offset of the next byte in *iov_
  size_t remaining_ = 0;
};

// Reads a request: the fuse_in_header, the opcode's argument struct, WRITE data.
class Reader {
 public:
  Reader() = default;
  Reader(const struct iovec* iov, int count, size_t bytes) : cursor_(iov, count, bytes) {}

  size_t remaining() const { return cursor_.remaining(); }
  void Limit(size_t bytes) { cursor_.Limit(bytes); }

  // Takes the next sizeof(T) bytes as a T. Bytes past the end read as zero: callers check
  // remaining() first (the dispatch table does for every opcode's argument struct), and INIT
  // relies on it to take the shorter fuse_init_in of kernels before 7.36.
  template <typename T>
  T Read() {
    static_assert(std::is_trivially_copyable_v<T>);
    T object;
    std::memset(&object, 0, sizeof(object));
    ReadBytes(&object, sizeof(object));
    return object;
  }
  // Copies up to `n` bytes (no more than remain) into `destination`.
  void ReadBytes(void* destination, size_t n);
  // The next `n` bytes as iovecs onto the request's buffers, for the block layer to write from.
  // -1 as BufferCursor::SplitIovecs.
  int SplitData(size_t n, struct iovec* window, int capacity) {
    return cursor_.SplitIovecs(n, window, capacity);
  }

 private:
  BufferCursor cursor_;
};

// Writes a reply into the room the transport gave for it.
class Writer {
 public:
  Writer() = default;
  Writer(const struct iovec* iov, int count, size_t bytes) : cursor_(iov, count, bytes) {}

  size_t remaining() const { return cursor_.remaining(); }
  // The room past the next `n` bytes as a Writer of its own; this one keeps those `n` bytes.
  // Splitting off the reply body leaves the header's room for the one place that writes headers.
  // False if fewer than `n` bytes remain.
  bool SplitAt(size_t n, Writer* rest);

  // Appends; false, and nothing written, if it does not fit.
  bool Write(const void* source, size_t n);
  template <typename T>
  bool Write(const T& object) {
    static_assert(std::is_trivially_copyable_v<T>);
    return Write(&object, sizeof(object));
  }
  // The next `n` bytes of room as iovecs, for the block layer to read into. -1 as
  // BufferCursor::SplitIovecs.
  int SplitData(size_t n, struct iovec* window, int capacity) {
    return cursor_.SplitIovecs(n, window, capacity);
  }

 private:
  explicit Writer(BufferCursor cursor) : cursor_(cursor) {}

  BufferCursor cursor_;
};

}  // namespace bexd::fuse
