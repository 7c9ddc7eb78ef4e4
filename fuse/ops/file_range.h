// SPDX-License-Identifier: GPL-2.0-or-later
// Byte ranges of the file as READ, WRITE and FALLOCATE give them: loff_t is signed.
#pragma once

#include <cstdint>

namespace bexd::fuse::ops {

inline constexpr uint64_t kMaxOffset = INT64_MAX;

// [offset, offset+length) stays within what a file offset can address.
inline bool RangeFits(uint64_t offset, uint64_t length) {
  return offset <= kMaxOffset && length <= kMaxOffset - offset;
}

}  // namespace bexd::fuse::ops
