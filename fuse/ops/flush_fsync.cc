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
  if (!call.options().writable) return Answer::Empty();  // nothing was written through this export
  return call.Submit(block::IoOp::kFlush, 0, 0, 0, FsyncDone);
}

}  // namespace bexd::fuse::ops
