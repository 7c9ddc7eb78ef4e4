// SPDX-License-Identifier: GPL-2.0-or-later
// The opcode handlers, one file per opcode or family, named after the opcodes (fuse/op_table.cc
// lists which handler serves which opcode). Each returns exactly one Answer; the table has
// checked INIT, the argument size, the room for a fixed-size reply and the node before it runs.
#pragma once

#include "fuse/answer.h"
#include "fuse/call.h"

namespace bexd::fuse::ops {

// init.cc
Answer Init(Call& call);
Answer Destroy(Call& call);
// forget_interrupt.cc: the opcodes that take no reply.
Answer Forget(Call& call);
Answer BatchForget(Call& call);
Answer Interrupt(Call& call);
Answer NotifyReply(Call& call);
// getattr.cc, setattr.cc, statfs.cc
Answer Getattr(Call& call);
Answer Setattr(Call& call);
Answer Statfs(Call& call);
// open_release.cc
Answer Open(Call& call);
Answer Release(Call& call);
// read.cc, write.cc
Answer Read(Call& call);
Answer Write(Call& call);
// flush_fsync.cc
Answer Flush(Call& call);
Answer Fsync(Call& call);
// fallocate.cc, lseek.cc
Answer Fallocate(Call& call);
Answer Lseek(Call& call);
// lookup.cc, readdir.cc: the virtio-fs root directory.
Answer Lookup(Call& call);
Answer Opendir(Call& call);
Answer Readdir(Call& call);
Answer Readdirplus(Call& call);
Answer Releasedir(Call& call);
// refused.cc
Answer Readlink(Call& call);
Answer ChangeTree(Call& call);
Answer Unsupported(Call& call);

}  // namespace bexd::fuse::ops
