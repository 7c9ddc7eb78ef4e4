// SPDX-License-Identifier: GPL-2.0-or-later
// A FUSE mount whose server is gone (bexd was killed: its /dev/fuse descriptors closed, so the
// kernel aborted the connection) stays on its mountpoint and answers ENOTCONN to everything until
// it is unmounted. A bexd restarted after a crash finds its predecessor's mount there; this clears
// it so the restart can mount again (docs/fuse-export.md#restarting-after-a-crash).
#pragma once

#include <absl/status/status.h>

#include <string>

namespace bexd::exports {

// Detaches every dead bexd FUSE mount stacked on `path` (canonical), logging a warning for each.
// Only a mount of bexd's type whose connection answers ENOTCONN counts as dead; anything else
// mounted there (a live bexd, another file system) is left alone for the caller to judge.
absl::Status DetachDeadBexdMounts(const std::string& path);

}  // namespace bexd::exports
