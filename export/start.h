// SPDX-License-Identifier: GPL-2.0-or-later
// Starting an export: the set-up every transport shares, in one place (as QEMU's blk_exp_add):
// the id and node checks, the queue-cpus check, the request core's session built from the
// common options, and errors prefixed with the export id. Each transport then only mounts or
// listens and starts its queue threads.
#pragma once

#include <absl/status/statusor.h>

#include <memory>

#include "block/block_node.h"
#include "export/export.h"
#include "export/options.h"

namespace bexd::exports {

// Creates and starts the export the options describe, serving `node`; returns once it serves
// requests (FUSE: mounted; vhost-user-fs: listening). Errors name the export id and the reason.
// `on_ended` (see Export::EndedFn) only ever runs for FUSE exports: a vhost-user-fs export
// outlives its frontends and waits for the next one.
absl::StatusOr<std::unique_ptr<Export>> StartExport(const ExportOptions& options,
                                                    std::shared_ptr<block::BlockNode> node,
                                                    Export::EndedFn on_ended = nullptr);

}  // namespace bexd::exports
