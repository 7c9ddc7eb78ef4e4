// SPDX-License-Identifier: GPL-2.0-or-later
// FLUSH (every close()) and FSYNC.
#include <linux/fuse.h>

#include "fuse/ops/ops.h"

namespace bexd::fuse::ops {
namespace {

Answer FsyncDone(Call& call, int64_t result) {
  return result < 0 ? Answer::IoError(result) : Answer::Empty();
}

}  // namespace

// close() flushes nothing: every WRITE already reached the block node, and durability is FSYNC's
// job (or writethrough's).
Answer Flush(Call& call) { return Answer::Empty(); }

Answer Fsync(Call& call) {
  // Nothing was written through a read-only export, and a node without volatile state (null, or
  // cache.no-flush) has nothing to make durable.
  if (!call.options().writable || !call.session().capabilities().flush) return Answer::Empty();
  return call.Submit(block::IoOp::kFlush, 0, 0, 0, FsyncDone);
}

}  // namespace bexd::fuse::ops
