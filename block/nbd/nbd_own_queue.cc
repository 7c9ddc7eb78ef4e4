// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/nbd/nbd_own_queue.h"

#include "block/nbd/nbd_request.h"
#include "block/request_check.h"

namespace bexd::block {

void NbdOwnQueue::Submit(IoRequest* request) {
  EmplaceDriverState<NbdRequestState>(request);
  if (int error = CheckRequest(*request, node_->size(), node_->read_only())) {
    connection_->FinishLater(request, error);
    return;
  }
  connection_->Start(request);
}

void NbdOwnQueue::OnFinished(void* context, IoRequest* request, int64_t result) {
  request->done(request, result);
}

}  // namespace bexd::block
