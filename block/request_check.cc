// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/request_check.h"

#include <limits.h>

#include <cerrno>

namespace bexd::block {
namespace {

constexpr uint32_t kKnownFlags = kIoFua | kIoMayUnmap;

bool IovecMatchesLength(const IoRequest& request) {
  if (request.iovcnt < 0 || request.iovcnt > IOV_MAX) return false;
  if (request.iovcnt > 0 && request.iov == nullptr) return false;
  uint64_t total = 0;
  for (int i = 0; i < request.iovcnt; ++i) {
    if (request.iov[i].iov_len > request.length - total) return false;
    total += request.iov[i].iov_len;
  }
  return total == request.length;
}

}  // namespace

int CheckRequest(const IoRequest& request, uint64_t size, bool read_only) {
  if ((request.flags & ~kKnownFlags) != 0) return -EINVAL;
  switch (request.op) {
    case IoOp::kFlush:
    case IoOp::kBlockStatus:
      return 0;
    case IoOp::kRead:
    case IoOp::kWrite:
      if (!IovecMatchesLength(request)) return -EINVAL;
      break;
    case IoOp::kDiscard:
    case IoOp::kWriteZeroes:
    case IoOp::kAllocate:
      break;
    default:
      return -EINVAL;
  }
  if (request.op != IoOp::kRead && read_only) return -EROFS;
  if (request.offset > size || request.length > size - request.offset) return -EINVAL;
  return 0;
}

}  // namespace bexd::block
