// SPDX-License-Identifier: GPL-2.0-or-later
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
#include "tests/support/qemu_check.h"
#include "tests/support/scratch_dir.h"

namespace bexd::block::testing {

using bexd::testing::ScratchDir;

// Runs `command` through /bin/sh; its combined output. A gtest failure (with the output) if it
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
// The whole node, read in order in chunks of `chunk` bytes with `depth` reads in flight on a queue
// of this thread (sequential reads as fio's QD16 cells issue them).
std::vector<unsigned char> ReadWithDepth(BlockNode& node, uint64_t chunk, int depth);
// What QEMU reads from the image: `qemu-img convert -O raw`.
std::vector<unsigned char> QemuContents(const std::string& image, const ScratchDir& dir);
// The first offset where two byte vectors differ, or -1 (with a size mismatch: the shorter size).
int64_t FirstDifference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b);

using bexd::testing::CheckResult;
using bexd::testing::QemuCheck;

struct PlannedWrite {
  uint64_t offset;
  std::vector<unsigned char> data;
};

// An image and a raw file that receive the same writes: the image through bexd, the raw file
// with pwrite. Verify() closes nothing; close the node first.
struct ImageWithReference {
  std::string image;
  std::string reference;
  // Writes `data` at `offset` to both; a gtest failure if the queue does not write it all.
  void Write(IoQueue& queue, const std::vector<unsigned char>& data, uint64_t offset) const;
  // The planned writes, to the reference only (the image got them another way).
  void ApplyToReference(const std::vector<std::vector<PlannedWrite>>& plans) const;
  // qemu-img check finds no corruption (and, unless `leaks_allowed`, no leak) and qemu-img
  // compare finds the two equal. Returns the check.
  CheckResult Verify(bool leaks_allowed = false) const;
};

// `image` as a raw file, made by qemu-img convert (the reference for later writes).
ImageWithReference WithReference(const std::string& image, const ScratchDir& dir);

// Keeps `depth` writes in flight on a queue of the calling thread until all are done.
void WriteWithDepth(BlockNode& node, const std::vector<PlannedWrite>& writes, int depth);
// One thread per plan, each with its own queue, all at once.
void WriteFromThreads(BlockNode& node, const std::vector<std::vector<PlannedWrite>>& plans,
                      int depth);

}  // namespace bexd::block::testing
