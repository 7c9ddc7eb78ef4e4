// SPDX-License-Identifier: GPL-2.0-or-later
// `help` given as the value of an item option, answered with what bexd supports, in QEMU's form:
// --object help lists the object types and --object TYPE,help a type's options (QEMU's
// user_creatable_print_help); --blockdev help and --export help list the drivers and the export
// types (QSD refuses those two with "Help is not available for this option").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace bexd::cli {

// The text to print before exiting 0 if the keyval `value` of --`option` asks for help (`help` or
// `?` as the implied key's value, or as a key of its own for --object), else nullopt. JSON values
// never ask.
std::optional<std::string> ItemHelp(std::string_view option, std::string_view value);

}  // namespace bexd::cli
