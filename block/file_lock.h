// SPDX-License-Identifier: GPL-2.0-or-later
// Image locking with open file description (OFD) locks, on the same bytes QEMU's file-posix
// driver uses, so bexd and QEMU processes keep each other from writing one image twice.
#pragma once

#include <absl/status/status.h>

#include <string_view>

#include "block/options.h"

namespace bexd::block {

// Locks the image open on `fd` for a reader (writable false) or a writer. Both refuse to share
// write and resize with other processes, unless a reader forces sharing (force_share); a writer
// also holds write and resize itself. With LockingMode::kAuto a filesystem without OFD locks only
// logs a warning.
absl::Status LockImage(int fd, std::string_view node_name, std::string_view filename, bool writable,
                       bool force_share, LockingMode mode);

}  // namespace bexd::block
