// SPDX-License-Identifier: GPL-2.0-or-later
// The opcodes that take no reply: FORGET, BATCH_FORGET, INTERRUPT, NOTIFY_REPLY. The table has
// checked their fixed argument structs.
#include <linux/fuse.h>

#include <cerrno>

#include "fuse/ops/ops.h"
#include "util/rate_limit.h"

namespace bexd::fuse::ops {

// Nodes are never created or dropped, so lookup counts need no tracking.
Answer Forget(Call& call) { return Answer::NoReply(); }

Answer BatchForget(Call& call) {
  const auto in = call.args().Read<struct fuse_batch_forget_in>();
  if (uint64_t{in.count} * sizeof(struct fuse_forget_one) != call.args().remaining()) {
    static log::RateLimit mismatched;
    log::Limited(mismatched, log::Level::kDebug,
                 "FUSE BATCH_FORGET of {} nodes in {} argument bytes", in.count,
                 sizeof(in) + call.args().remaining());
    return Answer::Rejected(EINVAL);
  }
  return Answer::NoReply();
}

// Requests in flight are block I/O that cannot be recalled; they complete normally.
Answer Interrupt(Call& call) { return Answer::NoReply(); }

// Answers a retrieve this core never sends.
Answer NotifyReply(Call& call) { return Answer::NoReply(); }

}  // namespace bexd::fuse::ops
