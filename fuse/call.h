// SPDX-License-Identifier: GPL-2.0-or-later
// One request as its handler (fuse/ops/) sees it: the session, the arguments to read, the reply
// body to write, the slot's state for what must outlive Dispatch(), and block I/O on the queue's
// IoQueue. Handlers are free functions `Answer Handler(Call&)` listed in the dispatch table.
#pragma once

#include <cstddef>
#include <cstdint>

#include "block/block_node.h"
#include "block/io_request.h"
#include "fuse/answer.h"
#include "fuse/queue_stats.h"
#include "fuse/request.h"
#include "fuse/scatter_gather.h"
#include "fuse/session.h"

namespace bexd::fuse {

class Queue;

class Call {
 public:
  // `reply` is the room past the fuse_out_header.
  Call(Queue& queue, Request* request, NodeKind node_kind, Reader args, Writer reply)
      : queue_(queue), request_(request), node_kind_(node_kind), args_(args), reply_(reply) {}

  Session& session() const;
  const SessionOptions& options() const { return session().options(); }
  block::BlockNode& node() const { return session().node(); }
  // The kind of node the request names, as the table checked it (kNone for opcodes that name no
  // node).
  NodeKind node_kind() const { return node_kind_; }
  // The opcode's arguments: the request past its header, without extensions.
  Reader& args() { return args_; }
  // The reply body: what follows the fuse_out_header.
  Writer& reply() { return reply_; }
  RequestState& state() const { return request_->state; }
  QueueStats& stats() const;
  uint64_t unique() const { return request_->state.unique; }

  // Writes `payload` as the whole reply body: a Payload answer, or EINVAL if it does not fit.
  Answer Reply(const void* payload, size_t bytes);
  template <typename T>
  Answer Reply(const T& payload) {
    return Reply(&payload, sizeof(payload));
  }

  // Submits the slot's block request (READ and WRITE data: state().data_iov) to the queue's
  // IoQueue. `done` runs on its completion, from IoQueue::Poll(), with a Call onto the same slot,
  // and answers the request (or submits again and answers Pending).
  Answer Submit(block::IoOp op, uint32_t flags, uint64_t offset, uint64_t length, IoDoneFn done);

 private:
  static void OnIoComplete(block::IoRequest* io, int64_t result);

  Queue& queue_;
  Request* const request_;
  const NodeKind node_kind_;
  Reader args_;
  Writer reply_;
};

}  // namespace bexd::fuse
