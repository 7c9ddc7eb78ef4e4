// SPDX-License-Identifier: GPL-2.0-or-later
// --export / block-export-add options (QSD's names where QSD has them) to exports::ExportOptions.
#pragma once

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "cli/config/option_reader.h"
#include "export/options.h"

namespace bexd::cli {

// The export types --export takes.
inline constexpr std::string_view kExportTypes[] = {"fuse", "vhost-user-fs"};

struct ExportSpec {
  exports::ExportOptions options;
  // QSD's iothread= names; each must name an --object iothread. bexd runs one thread per queue
  // instead of iothreads, so a list of N names asks for N queues.
  std::vector<std::string> iothreads;
};

// Checks everything the options alone decide, including that a FUSE mountpoint is an existing
// regular file. Relative paths become absolute (relative to the current directory).
absl::StatusOr<ExportSpec> ParseExportOptions(const nlohmann::json& object, Syntax syntax,
                                              const std::string& path = "");

}  // namespace bexd::cli
