// Test helpers for the qcow2 driver: images made and checked by QEMU's own tools (qemu-img,
// qemu-io), opened through bexd's file and qcow2 drivers, and read or written through a queue of
// the test thread.
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

// Runs `command` through /bin/sh; its standard output. A gtest failure (with the output) if it
// exits with a status other than `expected_status`.
std::string RunCommand(const std::string& command, int expected_status = 0);

struct ImageOptions {
  Qcow2Options qcow2;
  AioMode aio = AioMode::kNative;
  bool direct = false;
  bool open_backing = true;  // open the backing chain the header names
};

// Opens `path` as a qcow2 node over a file node. The backing chain the headers name opens
// read-only, qcow2 or raw as the backing format says (or as the magic shows).
absl::StatusOr<std::shared_ptr<BlockNode>> OpenImage(const std::string& path, bool read_only,
                                                     const ImageOptions& options = {});
std::shared_ptr<BlockNode> OpenImageOrFail(const std::string& path, bool read_only,
                                           const ImageOptions& options = {});

// The whole node, read through a queue of this thread in chunks of `chunk` bytes.
std::vector<unsigned char> ReadAll(BlockNode& node, uint64_t chunk = 1 << 20);
// What QEMU reads from the image: `qemu-img convert -O raw`.
std::vector<unsigned char> QemuContents(const std::string& image, const ScratchDir& dir);
// The first offset where two byte vectors differ, or -1 (with a size mismatch: the shorter size).
int64_t FirstDifference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b);

// `qemu-img check` output as JSON, and whether it reports no corruption (and no leaks).
struct CheckResult {
  int exit_status = 0;
  std::string output;
  uint64_t corruptions = 0;
  uint64_t leaks = 0;
};
CheckResult QemuCheck(const std::string& image);

}  // namespace bexd::block::testing
