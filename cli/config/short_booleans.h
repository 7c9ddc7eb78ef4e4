// SPDX-License-Identifier: GPL-2.0-or-later
// QEMU's old short forms of boolean options in --chardev ("server" for server=on, "nowait" for
// wait=off), which QEMU still accepts with a deprecation warning and QSD users' scripts still
// pass.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace bexd::cli {

// Rewrites every element after the first that has no '=' as NAME=on, or for "noNAME" as
// NAME=off; ",," stays an escaped comma. Each rewrite adds QEMU's warning to `warnings`.
std::string ExpandShortBooleans(std::string_view keyval, std::vector<std::string>* warnings);

}  // namespace bexd::cli
