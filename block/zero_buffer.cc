// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/zero_buffer.h"

namespace bexd::block {
namespace {

// Zero-initialized, so it lives in .bss and costs no space in the binary.
alignas(4096) char g_zeroes[kZeroBufferSize];

}  // namespace

const char* ZeroBuffer() { return g_zeroes; }

}  // namespace bexd::block
