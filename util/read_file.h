// SPDX-License-Identifier: GPL-2.0-or-later
// Reading a whole file that the user names (a config file, a secret), with a bound: a path such
// as /dev/zero or a huge file would otherwise be read into memory without end on the main thread
// (an outside audit ended the daemon with std::bad_alloc through QMP object-add).
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>

namespace bexd::util {

// The contents of `path`, or an error naming it: unreadable, or longer than `max_bytes`.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, uint64_t max_bytes);

}  // namespace bexd::util
