// SPDX-License-Identifier: GPL-2.0-or-later
// Size changes a client asks for, directly (SETATTR size, FALLOCATE past the end) or by the way
// (an O_TRUNC open or a WRITE past the end of a growable export). docs/fuse-core.md#size-changes
// has the rules.
#pragma once

#include <cstdint>

#include "fuse/call.h"
#include "util/rate_limit.h"

namespace bexd::fuse::ops {

enum class SizeChange {
  kSet,   // to exactly the size (Session::Resize)
  kGrow,  // to at least the size (Session::GrowTo)
};

// Changes the node's size for `call`; 0, or the errno to answer. A failure is logged as a warning
// that names the opcode, rate-limited through `limit` (one per call site).
int ChangeSize(Call& call, uint64_t size, SizeChange how, log::RateLimit& limit);

}  // namespace bexd::fuse::ops
