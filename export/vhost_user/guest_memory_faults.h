// SPDX-License-Identifier: GPL-2.0-or-later
// Survives a frontend whose guest memory cannot be faulted in. The sizes of its files are checked
// when the memory table arrives, but a hostile or broken frontend can still make a mapped page
// unbackable: it shrinks the file afterwards, hands a hugetlbfs file without enough huge pages,
// or a sparse file on a full tmpfs. Touching such a page raises SIGBUS, which would kill the
// daemon with every export. A SIGBUS inside a watched mapping instead replaces the page with a
// private zero page (the access then completes) and counts the fault; the ring that sees the
// count breaks, so the frontend must start over. A SIGBUS anywhere else still kills the daemon.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace bexd::exports {

// Installs the SIGBUS handler once per process; later calls return the first result.
absl::Status InstallGuestMemoryFaultHandler();

// Until UnwatchMapping(slot), a SIGBUS in [start, start + length) (a mapping aligned to `page`,
// its page size) is survived and counted in *faults. Returns the slot; fails when too many
// mappings are watched at once.
absl::StatusOr<int> WatchMapping(void* start, size_t length, size_t page,
                                 std::atomic<uint32_t>* faults);
void UnwatchMapping(int slot);

}  // namespace bexd::exports
