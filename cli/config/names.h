// SPDX-License-Identifier: GPL-2.0-or-later
// Rules for the names users give to nodes, exports, iothreads and chardevs.
#pragma once

#include <absl/status/status.h>

#include <string_view>

namespace bexd::cli {

// QEMU's rule for ids: a letter, then letters, digits, '-', '.' or '_'; at most 127 bytes (a
// node name must fit the file name of a vhost-user-fs image and log lines stay readable).
absl::Status CheckName(std::string_view name);
// CheckName(), and at most 31 bytes, as QEMU's node names (a BlockDriverState holds 32).
absl::Status CheckNodeName(std::string_view name);

}  // namespace bexd::cli
