// SPDX-License-Identifier: GPL-2.0-or-later
// QEMU's "key=value,key2=value2" option syntax (keyval), as used by --blockdev and --export.
#pragma once

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include <string_view>

namespace bexd::cli {

// Parses `text` into a JSON object whose leaves are all strings; the schema types them later.
// ",," in a value stands for one comma. Dotted keys nest ("cache.direct=on" gives
// {"cache":{"direct":"on"}}), and objects whose keys are exactly 0..n-1 become lists
// ("iothread.0=a,iothread.1=b"). If `implied_key` is not empty, a first element without '=' is
// the value of that key ("iothread,id=t0" with implied key "qom-type"). Repeated keys are errors.
absl::StatusOr<nlohmann::json> ParseKeyval(std::string_view text,
                                           std::string_view implied_key = {});

}  // namespace bexd::cli
