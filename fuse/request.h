// SPDX-License-Identifier: GPL-2.0-or-later
// The transport-agnostic FUSE request core's per-request contract. A transport (a /dev/fuse
// queue, a virtqueue) owns an array of Request slots per queue thread, points a slot at the bytes
// of one request and at room for its reply, and hands it to fuse::Queue::Dispatch().
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "fuse/request_state.h"

namespace bexd::fuse {

struct Request {
  // Set by the transport; valid until the completion callback has run.
  // The request as the kernel sent it: fuse_in_header, the opcode's arguments, WRITE data.
  const struct iovec* in = nullptr;
  int in_count = 0;
  // Room for the reply: fuse_out_header, then the opcode's reply (READ data lands here directly).
  // May alias `in`: the core copies what it needs from `in` before writing any of `out`.
  const struct iovec* out = nullptr;
  int out_count = 0;
  void* transport = nullptr;  // the transport's per-slot pointer; the core never touches it

  RequestState state;  // private to the core
};

// Called exactly once per dispatched request, on the queue's thread, possibly from inside
// Dispatch(). result > 0: that many bytes of `out` hold the reply; 0: the opcode takes no reply
// (FORGET, INTERRUPT); < 0: -errno, the bytes were not a FUSE request at all (too short for a
// header, or lengths that contradict themselves) and no reply could be built.
using CompletionFn = void (*)(Request* request, int64_t result, void* context);

}  // namespace bexd::fuse
