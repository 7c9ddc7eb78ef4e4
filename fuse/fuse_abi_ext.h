// SPDX-License-Identifier: GPL-2.0-or-later
// FUSE ABI pieces newer than the installed <linux/fuse.h> (protocol 7.38, Linux 6.1 headers).
// Everything else comes from the system header. Values are fixed by the kernel ABI.
#pragma once

#include <linux/fuse.h>

#include <cstdint>

namespace bexd::fuse::abi {

// 7.39 (named FUSE_DIRECT_IO_RELAX there, renamed in 7.40): shared mmap() is allowed on files
// opened with FOPEN_DIRECT_IO; the kernel keeps the page cache coherent around direct I/O.
// Kernels that do not know the bit ignore it.
inline constexpr uint64_t kDirectIoAllowMmap = uint64_t{1} << 36;

}  // namespace bexd::fuse::abi
