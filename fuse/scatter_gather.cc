#include "fuse/scatter_gather.h"

#include <algorithm>
#include <cstdint>

namespace bexd::fuse {
namespace {

// Finds the iovec holding byte `offset`; returns its index (count if none) and sets *skip to the
// offset within it.
int Locate(const struct iovec* iov, int count, size_t offset, size_t* skip) {
  int i = 0;
  while (i < count && offset >= iov[i].iov_len) {
    offset -= iov[i].iov_len;
    ++i;
  }
  *skip = offset;
  return i;
}

}  // namespace

bool TotalBytes(const struct iovec* iov, int count, size_t* total) {
  *total = 0;
  if (count < 0 || (count > 0 && iov == nullptr)) return false;
  size_t sum = 0;
  for (int i = 0; i < count; ++i) {
    if (iov[i].iov_len > SIZE_MAX - sum) return false;
    sum += iov[i].iov_len;
  }
  *total = sum;
  return true;
}

int WindowOf(const struct iovec* iov, int count, size_t offset, size_t length, struct iovec* window,
             int capacity) {
  size_t skip;
  int used = 0;
  for (int i = Locate(iov, count, offset, &skip); length > 0; ++i, skip = 0) {
    if (i >= count) return -1;
    const size_t chunk = std::min(length, iov[i].iov_len - skip);
    if (chunk == 0) continue;  // an empty iovec
    if (used == capacity) return -1;
    window[used].iov_base = static_cast<unsigned char*>(iov[i].iov_base) + skip;
    window[used].iov_len = chunk;
    ++used;
    length -= chunk;
  }
  return used;
}

}  // namespace bexd::fuse
