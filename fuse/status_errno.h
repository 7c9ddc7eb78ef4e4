// SPDX-License-Identifier: GPL-2.0-or-later
// Maps a control-path absl::Status (BlockNode::Truncate) to the errno a FUSE reply carries: the
// inverse of absl::ErrnoToStatusCode where that is unambiguous, EIO otherwise. A kernel failure
// wrapped with absl::ErrnoToStatus comes back as its errno (EPERM, EFBIG, ENOSPC, EINVAL, EIO,
// EBUSY); EROFS and EACCES come back as EPERM, which absl gives the same code. Drivers pick their
// refusals' codes to map the same way (block_node.h, Truncate).
#pragma once

#include <absl/status/status.h>

namespace bexd::fuse {

int ErrnoOf(const absl::Status& status);

}  // namespace bexd::fuse
