// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/iov_slice.h"

namespace bexd::block::qcow2 {

IovSlice SliceRange(const struct iovec* iov, int iovcnt, uint64_t position, uint64_t length,
                    struct iovec* out, int room) {
  int first = 0;
  while (first < iovcnt && position >= iov[first].iov_len) {
    position -= iov[first].iov_len;
    ++first;
  }
  IovSlice slice;
  if (position == 0) {
    uint64_t total = 0;
    int last = first;
    while (last < iovcnt && total < length) total += iov[last++].iov_len;
    if (total == length) {
      slice.iov = iov + first;
      slice.count = last - first;
      slice.bytes = length;
      return slice;
    }
  }
  slice.iov = out;
  for (int i = first; i < iovcnt && slice.bytes < length && slice.count < room; ++i) {
    uint64_t skip = i == first ? position : 0;
    uint64_t take = iov[i].iov_len - skip;
    if (take > length - slice.bytes) take = length - slice.bytes;
    out[slice.count].iov_base = static_cast<char*>(iov[i].iov_base) + skip;
    out[slice.count].iov_len = take;
    ++slice.count;
    slice.bytes += take;
  }
  return slice;
}

}  // namespace bexd::block::qcow2
