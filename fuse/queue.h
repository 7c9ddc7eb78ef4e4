// One transport queue thread's view of a FUSE session: it parses and answers the requests the
// transport hands to Dispatch(), submitting block I/O to the thread's own IoQueue. Everything here
// runs on that one thread; nothing on the READ/WRITE path locks or allocates.
#pragma once

#include <linux/fuse.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "block/block_node.h"
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
  static void OnIoComplete(block::IoRequest* io, int64_t result);

  // Validated request facts the handlers work from. Arguments start right after the header.
  struct Header {
    uint32_t opcode;
    uint64_t node_id;
    size_t arg_bytes;
  };

  // Handlers, one per opcode family; each ends in exactly one Reply*/Finish, or a Submit whose
  // completion does.
  void HandleInit(Request* request, const Header& header);
  void HandleDestroy(Request* request, const Header& header);
  void HandleStatfs(Request* request, const Header& header);
  void HandleNoReply(Request* request, const Header& header);
  void HandleGetattr(Request* request, const Header& header);
  void HandleSetattr(Request* request, const Header& header);
  void HandleOpen(Request* request, const Header& header);
  void HandleRelease(Request* request, const Header& header);
  void HandleRead(Request* request, const Header& header);
  void HandleWrite(Request* request, const Header& header);
  void HandleFlush(Request* request, const Header& header);
  void HandleFsync(Request* request, const Header& header);
  void HandleFallocate(Request* request, const Header& header);
  void HandleLseek(Request* request, const Header& header);
  void HandleLookup(Request* request, const Header& header);
  void HandleOpendir(Request* request, const Header& header);
  void HandleReleasedir(Request* request, const Header& header);
  void HandleReaddir(Request* request, const Header& header, bool plus);

  void OnReadDone(Request* request, int64_t result);
  void OnWriteDone(Request* request, int64_t result);
  void OnBlockStatusDone(Request* request, int64_t result);

  // Copies the opcode's fixed argument struct out of `in`; on short arguments replies EINVAL and
  // returns false.
  // Byte copies out of `in` and into `out`; the callers have checked the lengths against the
  // buffers, and the copies stop at the buffers' end regardless.
  static void CopyFromIn(const Request* request, size_t offset, void* dst, size_t n);
  static void CopyToOut(const Request* request, size_t offset, const void* src, size_t n);
  bool ReadArgs(Request* request, const Header& header, void* args, size_t size);
  template <typename T>
  bool ReadArgs(Request* request, const Header& header, T* args) {
    return ReadArgs(request, header, args, sizeof(T));
  }
  // Replies ENOENT/EISDIR/ENOTDIR and returns false unless the node is of the wanted kind.
  bool RequireKind(Request* request, const Header& header, NodeKind wanted);
  // Replies an error and returns false unless a reply with `payload_bytes` fits in `out`; called
  // before any side effect so that a request with no room for its answer changes nothing.
  bool RequireReplyRoom(Request* request, size_t payload_bytes);
  void SubmitIo(Request* request, block::IoOp op, uint32_t flags, uint64_t offset, uint64_t length);
  void SubmitBlockStatus(Request* request);
  // Applies a client's explicit size change (SETATTR size); 0, or the errno to answer.
  int ChangeSize(uint64_t size);
  struct fuse_attr AttrOf(NodeKind kind) const;

  // Reply endings. `error` is a positive errno.
  void ReplyError(Request* request, int error);
  // A failed block I/O: `result` is its -errno.
  void ReplyIoError(Request* request, int64_t result);
  void Reply(Request* request, const void* payload, size_t payload_bytes);
  template <typename T>
  void Reply(Request* request, const T& payload) {
    Reply(request, &payload, sizeof(payload));
  }
  // Writes just the header; `payload_bytes` of reply are already in place after it.
  void ReplyInPlace(Request* request, size_t payload_bytes);
  // Counts the request and hands it back to the transport. The slot must not be touched after.
  void Finish(Request* request, int64_t result, bool failed);

  const std::shared_ptr<Session> session_;
  const std::unique_ptr<block::IoQueue> io_queue_;
  const CompletionFn done_;
  void* const context_;
  QueueStats stats_;
};

}  // namespace bexd::fuse
