// SPDX-License-Identifier: GPL-2.0-or-later
// The core's private per-request state, embedded in each transport-owned fuse::Request slot so
// that a request in flight needs no heap memory. Transports never read or write it.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <variant>

#include "block/io_request.h"

namespace bexd::fuse {

class Answer;
class Call;
class Queue;

// Most iovecs a READ reply or WRITE payload may be split into. The kernel sends at most max_pages
// (256) data pages; the slack covers transports that split a page at a memory-region boundary.
inline constexpr int kMaxDataIovecs = 260;

// What a handler keeps for the completion of its block I/O, per opcode.
struct ReadState {
  uint32_t length = 0;  // bytes asked of the node: the most the reply carries
};
struct WriteState {
  uint32_t length = 0;  // bytes given to the node: the most the reply reports written
  // A durable write to a node without FUA: a kFlush follows, then the reply.
  bool flush_after = false;
  uint32_t written = 0;  // with flush_after: what the write reported, for the reply
  // What a growable export needs to write again after a concurrent shrink (WriteDone).
  uint64_t offset = 0;
  uint32_t flags = 0;
  bool retried = false;
};
struct SeekState {
  uint32_t whence = 0;    // SEEK_DATA or SEEK_HOLE
  uint64_t position = 0;  // where the scan for data or a hole has got to
};
using OpState = std::variant<std::monostate, ReadState, WriteState, SeekState>;

// Turns the result of a request's block I/O into its answer (see Call::Submit).
using IoDoneFn = Answer (*)(Call& call, int64_t result);

struct RequestState {
  block::IoRequest io;
  Queue* queue = nullptr;
  IoDoneFn io_done = nullptr;
  uint64_t unique = 0;
  uint64_t start_ns = 0;  // CLOCK_MONOTONIC at Dispatch, for the latency histogram
  size_t out_bytes = 0;   // room in Request::out
  uint32_t opcode = 0;
  OpState op;
  int data_iov_count = 0;
  // READ: windows onto Request::out past the fuse_out_header; WRITE: onto Request::in past the
  // fuse_write_in. The block request reads or writes them directly.
  struct iovec data_iov[kMaxDataIovecs];
};

}  // namespace bexd::fuse
