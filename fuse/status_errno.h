// Maps a control-path absl::Status (e.g. from BlockNode::Truncate) to the errno a FUSE reply
// carries. The inverse of absl::ErrnoToStatusCode where that is unambiguous, EIO otherwise.
#pragma once

#include <absl/status/status.h>

namespace bexd::fuse {

int ErrnoOf(const absl::Status& status);

}  // namespace bexd::fuse
