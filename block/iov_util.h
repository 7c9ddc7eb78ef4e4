// SPDX-License-Identifier: GPL-2.0-or-later
// Helpers for the submitter's scatter-gather lists, which drivers never modify.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace bexd::block {

// Walks an iovec from a byte position, copying into or out of it.
class IovCursor {
 public:
  IovCursor(const struct iovec* iov, int iovcnt, uint64_t position);
  // Copies n bytes from the cursor into dst and advances. The iovec must hold n more bytes.
  void CopyOut(void* dst, size_t n);
  // Copies n bytes from src into the iovec at the cursor and advances.
  void CopyIn(const void* src, size_t n);
  // Zeroes n bytes at the cursor and advances (qcow2: unallocated and zero clusters).
  void Zero(size_t n);

 private:
  template <typename Fn>
  void Walk(size_t n, Fn&& fn);

  const struct iovec* iov_;
  int iovcnt_;
  int index_ = 0;
  size_t within_ = 0;
};

// Whether every byte of [data, data + length) is zero. Word-wise, looking at the first word
// before anything else, so typical data is rejected after one load.
bool BufferIsZero(const void* data, size_t length);

// Whether the iovec holds exactly `length` bytes, all zero. False for a malformed list (a
// negative or missing vector, lengths that do not add up), which the driver then refuses.
bool IovIsZero(const struct iovec* iov, int iovcnt, uint64_t length);

// Zeroes every byte of the iovec from `position` to its end.
void ZeroIovFrom(const struct iovec* iov, int iovcnt, uint64_t position);

// Writes into `out` (room for iovcnt entries) the part of `iov` that starts `position` bytes in;
// returns the number of entries.
int SliceIov(const struct iovec* iov, int iovcnt, uint64_t position, struct iovec* out);

}  // namespace bexd::block
