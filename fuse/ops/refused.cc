// SPDX-License-Identifier: GPL-2.0-or-later
// The opcodes the core refuses: READLINK, those that would change the tree, and those it does not
// implement.
#include <cerrno>

#include "fuse/ops/ops.h"

namespace bexd::fuse::ops {

Answer Readlink(Call& call) { return Answer::Error(EINVAL); }  // neither node is a symlink

// MKNOD, MKDIR, SYMLINK, UNLINK, RMDIR, RENAME(2), LINK, CREATE, TMPFILE: the tree is fixed, one
// directory and one file.
Answer ChangeTree(Call& call) { return Answer::Error(EPERM); }

// ACCESS, the xattr calls, locks, ioctl, poll, copy_file_range, unknown opcodes...: the kernel
// remembers ENOSYS and stops asking (falling back to its own implementation where it has one).
Answer Unsupported(Call& call) { return Answer::Error(ENOSYS); }

}  // namespace bexd::fuse::ops
