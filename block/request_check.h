// SPDX-License-Identifier: GPL-2.0-or-later
// Validation every driver applies before it accepts a request.
#pragma once

#include <cstdint>

#include "block/io_request.h"

namespace bexd::block {

// 0 if `request` is well formed for a node of `size` bytes, else the -errno it must complete with:
// -EINVAL for an unknown op or flag, an iovec that does not add up to `length`, or a range past
// the end; -EROFS for a modifying op on a read-only node.
int CheckRequest(const IoRequest& request, uint64_t size, bool read_only);

}  // namespace bexd::block
