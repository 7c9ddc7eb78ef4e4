// SPDX-License-Identifier: GPL-2.0-or-later
// Runs a shell command for a test, bounded in time, with its output captured.
#pragma once

#include <string>

namespace bexd::testing {

// Runs `command` through the shell with a time limit (180 s); its combined output and exit
// status (-1 if it did not exit normally).
std::string RunCommand(const std::string& command, int* exit_status);

}  // namespace bexd::testing
