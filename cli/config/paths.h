// SPDX-License-Identifier: GPL-2.0-or-later
#pragma once

#include <string>

namespace bexd::cli {

// `path` made absolute against the current directory and normalised, so it keeps its meaning
// after a daemon changes directory. Returned unchanged if the current directory is unknown.
std::string AbsolutePath(const std::string& path);

}  // namespace bexd::cli
