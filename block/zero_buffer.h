// SPDX-License-Identifier: GPL-2.0-or-later
// A static buffer of zeroes that is never written: the data source of drivers that carry out
// write-zeroes by writing (a filesystem without fallocate, an NBD server without WRITE_ZEROES).
#pragma once

#include <cstddef>

namespace bexd::block {

inline constexpr size_t kZeroBufferSize = size_t{1} << 20;

// kZeroBufferSize bytes, page-aligned.
const char* ZeroBuffer();

}  // namespace bexd::block
