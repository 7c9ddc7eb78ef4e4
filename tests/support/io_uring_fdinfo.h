// SPDX-License-Identifier: GPL-2.0-or-later
// What the kernel says about this process's io_uring instances (/proc/self/fdinfo), so tests can
// check that registered buffers are really registered, not only that data arrives.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace bexd::testing {

// For each io_uring descriptor of this process: its registered buffers' lengths by index, as
// fdinfo lists them after "UserBufs:" ("index: 0xaddress/length", or "index: <none>" for an empty
// slot of a sparse table, which counts as 0). A ring without buffers gives an empty map.
std::vector<std::map<int, uint64_t>> IoUringRegisteredBuffers();

}  // namespace bexd::testing
