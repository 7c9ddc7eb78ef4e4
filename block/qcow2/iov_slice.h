// SPDX-License-Identifier: GPL-2.0-or-later
// Describing part of a submitter's scatter-gather list to a child request without copying data.
#pragma once

#include <sys/uio.h>

#include <cstdint>

namespace bexd::block::qcow2 {

struct IovSlice {
  const struct iovec* iov = nullptr;
  int count = 0;
  uint64_t bytes = 0;  // may fall short of the length asked for, see SliceRange
};

// Bytes [position, position+length) of `iov`. When the range starts and ends on segment
// boundaries the slice points into `iov` itself; otherwise up to `room` adjusted segments are
// written to `out`, and the slice covers less than `length` if more would be needed.
IovSlice SliceRange(const struct iovec* iov, int iovcnt, uint64_t position, uint64_t length,
                    struct iovec* out, int room);

}  // namespace bexd::block::qcow2
