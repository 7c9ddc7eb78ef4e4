// SPDX-License-Identifier: GPL-2.0-or-later
// FUSE ABI pieces newer than the installed <linux/fuse.h> (protocol 7.38, Linux 6.1 headers).
// Everything else comes from the system header. Values are fixed by the kernel ABI.
#pragma once

#include <linux/fuse.h>
#include <sys/ioctl.h>

#include <cstddef>
#include <cstdint>

namespace bexd::fuse::abi {

// 7.39 (named FUSE_DIRECT_IO_RELAX there, renamed in 7.40): shared mmap() is allowed on files
// opened with FOPEN_DIRECT_IO; the kernel keeps the page cache coherent around direct I/O.
// Kernels that do not know the bit ignore it.
inline constexpr uint64_t kDirectIoAllowMmap = uint64_t{1} << 36;

// 7.40 (Linux 6.9, CONFIG_FUSE_PASSTHROUGH): FUSE_PASSTHROUGH in INIT's flags. The kernel turns it
// on only if the reply's max_stack_depth is 1 or 2 (FILESYSTEM_MAX_STACK_DEPTH) and the server
// has CAP_SYS_ADMIN when it registers backing files.
inline constexpr uint64_t kPassthrough = uint64_t{1} << 37;
// fuse_init_out.max_stack_depth sits where 7.38's unused[0] is.
inline constexpr size_t kInitOutMaxStackDepthOffset = 36;
static_assert(offsetof(struct fuse_init_out, unused) == kInitOutMaxStackDepthOffset);

// fuse_open_out.open_flags: read, write, splice and mmap of this open file go to the backing
// file named by fuse_open_out.backing_id (7.38's `padding`).
inline constexpr uint32_t kOpenPassthrough = uint32_t{1} << 7;
static_assert(offsetof(struct fuse_open_out, padding) == 12);

// FUSE_DEV_IOC_BACKING_OPEN's argument: registers `fd` and returns a backing id (> 0).
struct BackingMap {
  int32_t fd;
  uint32_t flags;  // must be 0
  uint64_t padding;
};
static_assert(sizeof(BackingMap) == 16);

inline constexpr unsigned long kDevIocBackingOpen = _IOW(FUSE_DEV_IOC_MAGIC, 1, BackingMap);
// Argument: the backing id (uint32_t).
inline constexpr unsigned long kDevIocBackingClose = _IOW(FUSE_DEV_IOC_MAGIC, 2, uint32_t);

}  // namespace bexd::fuse::abi
