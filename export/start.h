#pragma once

#include <absl/status/statusor.h>

#include <memory>

#include "block/block_node.h"
#include "export/export.h"
#include "export/options.h"

namespace bexd::exp {

// Creates and starts the export the options describe, serving `node`; returns once it serves
// requests (FUSE: mounted; vhost-user-fs: listening). Errors name the export id and the reason.
absl::StatusOr<std::unique_ptr<Export>> StartExport(const ExportOptions& options,
                                                    std::shared_ptr<block::BlockNode> node);

}  // namespace bexd::exp
