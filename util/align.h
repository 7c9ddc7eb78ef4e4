// SPDX-License-Identifier: GPL-2.0-or-later
// Rounding offsets to a block size (any size above zero, not only powers of two).
#pragma once

#include <cstdint>

namespace bexd::util {

constexpr uint64_t AlignDown(uint64_t value, uint64_t align) { return value - value % align; }
constexpr uint64_t AlignUp(uint64_t value, uint64_t align) {
  return AlignDown(value + align - 1, align);
}

}  // namespace bexd::util
