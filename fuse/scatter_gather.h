// Bounds-checked views of a request's scatter-gather buffers, which come from an untrusted client.
// (Copying bytes in and out is block::IovCursor's job; it stops at the end of the buffers.)
#pragma once

#include <sys/uio.h>

#include <cstddef>

namespace bexd::fuse {

// Sum of the iovec lengths; false if `count` is negative, an iovec array is missing, or the sum
// overflows.
bool TotalBytes(const struct iovec* iov, int count, size_t* total);

// Describes bytes [offset, offset+length) of the buffers as at most `capacity` iovecs in `window`.
// Returns the number used, or -1 if the buffers end too early or more iovecs would be needed.
int WindowOf(const struct iovec* iov, int count, size_t offset, size_t length, struct iovec* window,
             int capacity);

}  // namespace bexd::fuse
