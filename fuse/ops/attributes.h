// SPDX-License-Identifier: GPL-2.0-or-later
// The attributes the core presents for its two nodes (GETATTR, SETATTR, LOOKUP, READDIRPLUS).
#pragma once

#include <linux/fuse.h>

#include <cstdint>

#include "fuse/session.h"

namespace bexd::fuse::ops {

// How long the kernel may cache attributes and names. The size can change behind its back (a
// resize through the control socket), so keep this short.
inline constexpr uint64_t kAttributeValidSeconds = 1;

struct fuse_attr AttrOf(const Session& session, NodeKind kind);

}  // namespace bexd::fuse::ops
