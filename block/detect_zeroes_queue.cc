// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/detect_zeroes_queue.h"

#include "block/iov_util.h"

namespace bexd::block {

void DetectZeroesQueue::Submit(IoRequest* request) {
  if (request->op == IoOp::kWrite && (request->flags & kIoFua) == 0 && request->length > 0 &&
      IovIsZero(request->iov, request->iovcnt, request->length)) {
    request->op = IoOp::kWriteZeroes;
    request->flags |= zero_flags_;
    request->iov = nullptr;
    request->iovcnt = 0;
  }
  driver_->Submit(request);
}

}  // namespace bexd::block
