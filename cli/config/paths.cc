// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/paths.h"

#include <filesystem>
#include <system_error>

namespace bexd::cli {

std::string AbsolutePath(const std::string& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return error ? path : absolute.lexically_normal().string();
}

}  // namespace bexd::cli
