// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuse/status_errno.h"

#include <cerrno>

namespace bexd::fuse {

int ErrnoOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
      return EINVAL;
    case absl::StatusCode::kNotFound:
      return ENOENT;
    case absl::StatusCode::kAlreadyExists:
      return EEXIST;
    case absl::StatusCode::kPermissionDenied:
      return EPERM;
    case absl::StatusCode::kResourceExhausted:
      return ENOSPC;
    case absl::StatusCode::kOutOfRange:
      return EFBIG;
    case absl::StatusCode::kUnimplemented:
      return EOPNOTSUPP;
    case absl::StatusCode::kFailedPrecondition:
      return EBUSY;
    case absl::StatusCode::kUnavailable:
      return EAGAIN;
    case absl::StatusCode::kCancelled:
      return ECANCELED;
    case absl::StatusCode::kDeadlineExceeded:
      return ETIMEDOUT;
    default:
      return EIO;
  }
}

}  // namespace bexd::fuse
