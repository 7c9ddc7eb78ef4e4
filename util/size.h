// SPDX-License-Identifier: GPL-2.0-or-later
// Byte counts as people write them: digits with an optional binary suffix, k/K, m/M, g/G, t/T,
// p/P or e/E (powers of 1024, as QEMU's keyval and qemu-img take them). The one parser for
// sizes in options, on the command line and in the perf tools.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string_view>

namespace bexd::util {

// "4096", "64k", "1G". Fails, saying why, for anything else (signs, spaces, fractions, an unknown
// suffix) and for values above 2^64 - 1.
absl::StatusOr<uint64_t> ParseSize(std::string_view text);

}  // namespace bexd::util
