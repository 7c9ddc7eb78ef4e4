// SPDX-License-Identifier: GPL-2.0-or-later
// Test helper: drives an IoQueue the way a queue thread does (Submit, Poll, wait on event_fd)
// with every wait bounded so a broken driver fails the test instead of hanging it.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "block/block_node.h"
#include "block/io_request.h"

namespace bexd::block::testing {

struct Outcome {
  bool done = false;
  int64_t result = 0;
  int completions = 0;
};

// Fills `request` for one op; its callback records into `outcome` (stored in request->opaque).
void Prepare(IoRequest* request, Outcome* outcome, IoOp op, uint64_t offset, uint64_t length,
             const struct iovec* iov = nullptr, int iovcnt = 0, uint32_t flags = 0);

// Polls `queue` until in_flight() is 0, sleeping on event_fd() between polls; false if that
// takes longer than `timeout_ms`.
bool WaitIdle(IoQueue& queue, int timeout_ms = 20000);

// Submits one request, waits for it and returns its result (or a gtest failure and INT64_MIN).
int64_t RunOne(IoQueue& queue, IoOp op, uint64_t offset, uint64_t length,
               const struct iovec* iov = nullptr, int iovcnt = 0, uint32_t flags = 0,
               bool* status_data = nullptr);
int64_t ReadAt(IoQueue& queue, void* buffer, uint64_t length, uint64_t offset);
int64_t WriteAt(IoQueue& queue, const void* buffer, uint64_t length, uint64_t offset,
                uint32_t flags = 0);

// A deterministic byte pattern that differs per seed and position.
std::vector<unsigned char> Pattern(size_t length, uint32_t seed);

}  // namespace bexd::block::testing
