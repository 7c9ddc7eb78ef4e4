// SPDX-License-Identifier: GPL-2.0-or-later
// Rules for the names users give to nodes, exports, iothreads and chardevs.
#pragma once

#include <absl/status/status.h>

#include <string>
#include <string_view>

#include "cli/config/option_reader.h"

namespace bexd::cli {

// QEMU's rule for ids: a letter, then letters, digits, '-', '.' or '_'; at most 127 bytes (a
// node name must fit the file name of a vhost-user-fs image and log lines stay readable).
absl::Status CheckName(std::string_view name);
// CheckName(), and at most 31 bytes, as QEMU's node names (a BlockDriverState holds 32).
absl::Status CheckNodeName(std::string_view name);
// The required "id" of an object (iothread, secret, TLS credentials), checked with CheckName().
void ReadId(OptionReader& reader, std::string* id);

}  // namespace bexd::cli
