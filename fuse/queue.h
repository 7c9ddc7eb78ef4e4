// SPDX-License-Identifier: GPL-2.0-or-later
// One transport queue thread's view of a FUSE session: it parses and answers the requests the
// transport hands to Dispatch(), submitting block I/O to the thread's own IoQueue. Everything here
// runs on that one thread; nothing on the READ/WRITE path locks or allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "block/block_node.h"
#include "fuse/answer.h"
#include "fuse/queue_stats.h"
#include "fuse/request.h"
#include "fuse/session.h"

namespace bexd::fuse {

class Queue {
 public:
  // `done` runs exactly once per dispatched request, with `context`, on this thread: from inside
  // Dispatch() for requests answered at once, from inside io_queue().Poll() for block I/O.
  Queue(std::shared_ptr<Session> session, std::unique_ptr<block::IoQueue> io_queue,
        CompletionFn done, void* context);
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // Takes one request. The slot stays busy until `done` has run for it. `in` must hold exactly
  // the request (fuse_in_header.len bytes); `out` is room for the reply and may alias `in`.
  void Dispatch(Request* request);

  // The transport waits on io_queue().event_fd() and calls io_queue().Poll() after a batch of
  // Dispatch() calls and whenever that fd is readable.
  block::IoQueue& io_queue() { return *io_queue_; }
  QueueStats& stats() { return stats_; }
  const QueueStats& stats() const { return stats_; }
  Session& session() { return *session_; }

 private:
  friend class Call;  // answers from block I/O completions through Respond()

  // The one place a request is answered: writes its fuse_out_header (for a payload or an error),
  // counts it and hands it back to the transport. Nothing touches the slot afterwards.
  void Respond(Request* request, Answer answer);
  // Counts the request and calls the transport's CompletionFn.
  void Finish(Request* request, int64_t result, bool failed);

  const std::shared_ptr<Session> session_;
  const std::unique_ptr<block::IoQueue> io_queue_;
  const CompletionFn done_;
  void* const context_;
  QueueStats stats_;
};

}  // namespace bexd::fuse
