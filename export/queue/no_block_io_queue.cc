// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/queue/no_block_io_queue.h"

#include <cerrno>

#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::exports {

void NoBlockIoQueue::Submit(block::IoRequest* request) {
  block::EmplaceDriverState<block::RequestLink>(request);
  refused_.PushBack(request);
  ++in_flight_;
}

void NoBlockIoQueue::Poll() {
  if (refused_.empty()) return;
  // The client is a guest: its mistakes must not flood the log.
  static log::RateLimit limit;
  log::Limited(limit, log::Level::kWarn, "{}: refusing block I/O on a queue that serves none",
               label_);
  while (block::IoRequest* request = refused_.PopFront()) {
    --in_flight_;
    request->done(request, -EIO);
  }
}

}  // namespace bexd::exports
