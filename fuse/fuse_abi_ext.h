// SPDX-License-Identifier: GPL-2.0-or-later
// FUSE ABI pieces newer than the installed <linux/fuse.h> (protocol 7.38, Linux 6.1 headers).
// Everything else comes from the system header. Values are fixed by the kernel ABI.
#pragma once

#include <linux/fuse.h>

#include <cstddef>
#include <cstdint>

namespace bexd::fuse::abi {

// 7.39 (named FUSE_DIRECT_IO_RELAX there, renamed in 7.40): shared mmap() is allowed on files
// opened with FOPEN_DIRECT_IO; the kernel keeps the page cache coherent around direct I/O.
// Kernels that do not know the bit ignore it.
inline constexpr uint64_t kDirectIoAllowMmap = uint64_t{1} << 36;

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
