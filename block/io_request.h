// SPDX-License-Identifier: GPL-2.0-or-later
// One asynchronous block I/O. The submitter owns the storage (a request slot of a queue thread), so
// the hot path allocates nothing; the driver keeps its per-request state in `driver_state`.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace bexd::block {

enum class IoOp : uint8_t {
  kRead,
  kWrite,
  kFlush,
  kDiscard,      // may deallocate [offset, offset+length); reads afterwards are unspecified
  kWriteZeroes,  // [offset, offset+length) reads as zeroes afterwards
  kBlockStatus,  // describes the extent starting at offset, see IoRequest::status_data
  kAllocate,     // reserves storage for [offset, offset+length); the contents stay as they are
};

// Whether the op reads or writes through the request's iovec; the others leave it unset.
inline bool HasData(IoOp op) { return op == IoOp::kRead || op == IoOp::kWrite; }

enum IoFlags : uint32_t {
  kIoFua = 1u << 0,       // kWrite: data is durable when the request completes
  kIoMayUnmap = 1u << 1,  // kWriteZeroes: the driver may deallocate the range
};

struct IoRequest;
// result: bytes transferred (kRead/kWrite/kDiscard/kWriteZeroes/kAllocate: the full length on
// success),
// 0 for kFlush, the extent length for kBlockStatus (0 at or past the end), or -errno.
using IoCallback = void (*)(IoRequest* request, int64_t result);

// op to iovcnt are the request; a format driver that hands it on to its child's queue (raw)
// shifts `offset`, caps `length` and drops flags in place, so once it is submitted the submitter
// reads back only the result and status_data and keeps its own copy of the range it asked for.
struct IoRequest {
  IoOp op = IoOp::kRead;
  uint32_t flags = 0;
  uint64_t offset = 0;
  // kDiscard/kWriteZeroes/kBlockStatus: bytes to cover; kRead/kWrite: sum of the iovec lengths.
  uint64_t length = 0;
  const struct iovec* iov = nullptr;
  int iovcnt = 0;
  IoCallback done = nullptr;
  void* opaque = nullptr;  // the submitter's; drivers never touch it
  // kBlockStatus output: true if the result's bytes from the requested offset may hold data,
  // false if they read as zeroes without being allocated (a hole).
  bool status_data = false;
  // Driver-private per-request state (a libaio iocb, a deadline, a bounce buffer handle).
  alignas(16) unsigned char driver_state[192];
};

}  // namespace bexd::block
