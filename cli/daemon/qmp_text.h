// SPDX-License-Identifier: GPL-2.0-or-later
// QMP messages written byte for byte as QEMU writes them (qobject's JSON writer behind a
// monitor), so that scripts grepping a monitor's output for `{"return": {}}` match bexd too.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace bexd::cli {

// One message without its final line end. Compact: `{"a": 1, "b": [1, 2]}`. Pretty: one member
// per line, 4 spaces of indentation per level, empty containers as "{" newline "}". Every line
// ends with "\r\n" (a QEMU monitor turns each "\n" into "\r\n"). Object members come in the order
// of QEMU's QDict (its hash buckets), strings escape everything outside printable ASCII as
// \uXXXX, and invalid UTF-8 becomes \uFFFD.
std::string QmpText(const nlohmann::json& message, bool pretty);

}  // namespace bexd::cli
