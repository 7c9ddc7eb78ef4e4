// SPDX-License-Identifier: GPL-2.0-or-later
// --blockdev / blockdev-add options (QEMU's names) to block::BlockdevOptions.
#pragma once

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "block/options.h"
#include "cli/config/option_reader.h"

namespace bexd::cli {

// The drivers --blockdev takes, by QEMU's names (null-co also answers to its alias null).
inline constexpr std::string_view kBlockDrivers[] = {"file",  "host_device", "nbd", "null-co",
                                                     "qcow2", "raw",         "rbd"};

// Errors name the key by its path below `path` ("blockdev[0].cache.direct").
absl::StatusOr<block::BlockdevOptions> ParseBlockdevOptions(const nlohmann::json& object,
                                                            Syntax syntax,
                                                            const std::string& path = "");

}  // namespace bexd::cli
