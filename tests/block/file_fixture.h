// SPDX-License-Identifier: GPL-2.0-or-later
// Test helpers for the file driver: a scratch directory on a filesystem that supports O_DIRECT,
// opening nodes, and reading an image behind the driver's back.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "block/block_node.h"
#include "block/options.h"
#include "tests/support/scratch_dir.h"

namespace bexd::block::testing {

using bexd::testing::ScratchDir;

// Every aio mode, for suites that run in each; and a test-name part for one.
inline constexpr AioMode kAllAioModes[] = {AioMode::kNative, AioMode::kThreads, AioMode::kIoUring};
std::string AioTestName(AioMode aio);

absl::StatusOr<std::shared_ptr<BlockNode>> OpenFile(const FileOptions& options,
                                                    bool read_only = false,
                                                    const std::string& node_name = "disk0",
                                                    bool auto_read_only = false);
// A node on `path` with these modes; a gtest failure and nullptr if it does not open.
std::shared_ptr<BlockNode> OpenFileOrFail(const std::string& path, AioMode aio, bool direct,
                                          DiscardMode discard = DiscardMode::kIgnore);
std::unique_ptr<IoQueue> MakeQueue(BlockNode& node);

// The bytes of a file, read with a plain descriptor.
std::vector<unsigned char> ReadFile(const std::string& path, uint64_t offset, uint64_t length);
void WriteFile(const std::string& path, const std::vector<unsigned char>& data, uint64_t offset);
uint64_t FileSize(const std::string& path);

// Runs a command through /bin/sh; its exit status.
int Shell(const std::string& command);

}  // namespace bexd::block::testing
