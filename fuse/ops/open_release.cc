// SPDX-License-Identifier: GPL-2.0-or-later
// OPEN and RELEASE of the file.
#include <fcntl.h>
#include <linux/fuse.h>

#include <cerrno>
#include <cstring>

#include "fuse/fuse_abi_ext.h"
#include "fuse/ops/ops.h"
#include "fuse/ops/size_change.h"

namespace bexd::fuse::ops {
namespace {

// The handles OPEN hands out. There is one file, so a handle says only how the open is served;
// RELEASE checks it so that a stray RELEASE cannot drop someone else's open count.
constexpr uint64_t kFileHandle = 1;
constexpr uint64_t kPassthroughHandle = 2;

}  // namespace

Answer Open(Call& call) {
  const auto in = call.args().Read<struct fuse_open_in>();
  Session& session = call.session();
  // O_TRUNC reaches us because INIT negotiated FUSE_ATOMIC_O_TRUNC; it asks to modify the file
  // even with O_RDONLY.
  const bool truncate = in.flags & O_TRUNC;
  if (((in.flags & O_ACCMODE) != O_RDONLY || truncate) && !session.options().writable) {
    return Answer::Error(EROFS);
  }
  // `cp`, `dd` and `>` open with O_TRUNC. A growable export's size follows what is written, so
  // it is emptied; a fixed-size one is a disk whose size is not the writer's to change, so it
  // keeps its size and data and the writes that follow overwrite it from the start (as QSD).
  if (truncate && session.options().growable) {
    static log::RateLimit failed;
    if (int error = ChangeSize(call, 0, SizeChange::kSet, failed)) return Answer::Error(error);
  }
  struct fuse_open_out out;
  std::memset(&out, 0, sizeof(out));
  const int32_t backing_id = session.passthrough() != nullptr ? session.passthrough()->Open() : 0;
  if (backing_id > 0) {
    // The kernel reads, writes and maps the host file itself (no FOPEN_DIRECT_IO: the client's
    // own O_DIRECT decides whether the host page cache is used).
    session.node().SharePageCache();
    out.fh = kPassthroughHandle;
    out.open_flags = abi::kOpenPassthrough;
    out.padding = static_cast<uint32_t>(backing_id);  // backing_id in 7.40
  } else {
    // Every read and write goes to the block node (no page cache to keep coherent), and writes
    // to the one file may run concurrently instead of serialising on the inode lock.
    out.fh = kFileHandle;
    out.open_flags = FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES;
  }
  session.HandleOpened();
  return call.Reply(out);
}

Answer Release(Call& call) {
  const auto in = call.args().Read<struct fuse_release_in>();
  Session& session = call.session();
  if (in.fh == kPassthroughHandle && session.passthrough() != nullptr) {
    session.passthrough()->Release();
  } else if (in.fh != kFileHandle) {
    return Answer::Error(EBADF);
  }
  session.HandleReleased();
  return Answer::Empty();
}

}  // namespace bexd::fuse::ops
