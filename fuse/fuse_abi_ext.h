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
// FUSE over io_uring (7.42, Linux 6.14; include/uapi/linux/fuse.h and fs/fuse/dev_uring.c). The
// kernel offers this INIT flag only while /sys/module/fuse/parameters/enable_uring is Y; a server
// that accepts it must register ring entries on every queue (one per possible CPU) before new
// requests flow. FORGET and INTERRUPT keep coming over /dev/fuse.
inline constexpr uint64_t kOverIoUring = uint64_t{1} << 41;

inline constexpr size_t kUringInOutHeaderBytes = 128;  // FUSE_URING_IN_OUT_HEADER_SZ
inline constexpr size_t kUringOpInOutBytes = 128;      // FUSE_URING_OP_IN_OUT_SZ

// The kernel's per-request bookkeeping in a ring entry's header buffer.
struct fuse_uring_ent_in_out {
  uint64_t flags;
  // The request's `unique`; a commit names it in fuse_uring_cmd_req::commit_id.
  uint64_t commit_id;
  // Bytes of the payload buffer in use: the request's arguments after the first (kernel to
  // server), the reply's arguments (server to kernel).
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};

// A ring entry's header buffer (iov[0] of the REGISTER command). On fetch `in_out` holds the
// fuse_in_header and `op_in` the opcode's first argument (its fixed struct); everything after it
// (WRITE data, names) is in the payload buffer. On commit `in_out` holds the fuse_out_header and
// every reply argument goes in the payload buffer.
struct fuse_uring_req_header {
  char in_out[kUringInOutHeaderBytes];
  char op_in[kUringOpInOutBytes];
  struct fuse_uring_ent_in_out ring_ent_in_out;
};

// io_uring_sqe::cmd_op of an IORING_OP_URING_CMD on /dev/fuse.
enum fuse_uring_cmd : uint32_t {
  FUSE_IO_URING_CMD_INVALID = 0,
  // sqe->addr: two iovecs (header buffer, payload buffer), sqe->len = 2. Completes when the
  // kernel has put a request in the entry.
  FUSE_IO_URING_CMD_REGISTER = 1,
  // Commits the reply in the entry named by commit_id and completes with the next request.
  FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2,
};

// The command area (io_uring_sqe::cmd, 80 bytes with IORING_SETUP_SQE128).
struct fuse_uring_cmd_req {
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;  // the queue: the CPU whose requests it carries
  uint8_t padding[6];
};

static_assert(sizeof(fuse_uring_ent_in_out) == 32);
static_assert(sizeof(fuse_uring_req_header) == 288);
static_assert(sizeof(fuse_uring_cmd_req) == 24);

}  // namespace bexd::fuse::abi
