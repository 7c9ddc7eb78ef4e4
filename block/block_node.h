// SPDX-License-Identifier: GPL-2.0-or-later
// The driver interface. A BlockNode is one opened image, shared by every thread; an IoQueue is one
// thread's I/O context on it (its own libaio context and eventfd), so the I/O path takes no lock.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "block/io_request.h"
#include "block/options.h"

namespace bexd::block {

// Owned by exactly one thread. Completion callbacks run only inside Poll(), on that thread, never
// inside Submit(), so a callback may submit again without re-entering the submitter's code.
class IoQueue {
 public:
  virtual ~IoQueue() = default;
  // Queues a request. It completes exactly once, through request->done, from a later Poll().
  // A driver may start it at once (the file driver sends its batch when a request cannot merge
  // into it), so the request's data must be in place when it is submitted.
  virtual void Submit(IoRequest* request) = 0;
  // Sends queued requests to the backend (one io_submit for a batch), then runs the callbacks of
  // every request that has completed. Cheap when nothing is pending. Call after a batch of
  // Submit()s and whenever event_fd() becomes readable. A request a callback submits during
  // Poll() is under way when Poll() returns (or completed, if event_fd() is -1): callers wait on
  // event_fd() only, so one left queued until some later Poll() could wait forever. A thread
  // with several queues polls each whose event_fd() is readable, not only the one it waits for:
  // aio=native queues of one thread share a ring, and room freed by one's Poll() is what lets
  // another's waiting requests go (block/aio_context.h).
  virtual void Poll() = 0;
  // Readable when completions wait for Poll(); -1 if the driver completes everything within
  // Poll() itself (the caller then never needs to wait for it).
  virtual int event_fd() const = 0;
  // Requests submitted and not yet completed.
  virtual uint32_t in_flight() const = 0;
  // The descriptors whose readiness event_fd() stands for. A queue that waits for its child
  // queues in an epoll set of its own (qcow2) watches these rather than a child's event_fd():
  // epoll sets nest at most 4 deep (the kernel's EP_MAX_NESTS), and a backing chain is deeper. By
  // default event_fd() itself.
  virtual void AppendWaitFds(std::vector<int>* fds) const {
    if (event_fd() >= 0) fds->push_back(event_fd());
  }
  // The memory the caller's request data lives in (a transport's request and reply buffers), for
  // a driver that can map it into the kernel once instead of on every request (io_uring's
  // registered buffers). Regions are disjoint and sorted by address. A hint: drivers that cannot
  // use it ignore it, and data elsewhere still works. It replaces the regions named before; an
  // empty span forgets them, which the caller must do before it unmaps them. Control path, only
  // while no request is in flight.
  virtual void UseBuffers(std::span<const struct iovec> regions) {}
  // The caller watches event_fd() edge-triggered (EPOLLET) and calls Poll() after every wake-up,
  // so Poll() need not clear it (a system call per Poll() saved where the fd is an eventfd that is
  // signalled once per completion: each signal wakes an edge-triggered waiter again, however
  // high its counter). Without this, event_fd() may be watched level-triggered and Poll() clears
  // it. A hint: a driver keeps its own behaviour if that already suits both. Control path, before
  // the first Submit().
  virtual void SetEdgeTriggeredWaiter() {}
};

// What a node can do, so that its users answer from it instead of trying (as nbdkit's can_trim,
// can_zero, can_extents, can_flush, can_fua). Each field defaults to what the interface promised
// before nodes said (every op accepted and carried out), so a driver that does not say behaves as
// it always did. A node with children derives its own from theirs (raw_node.cc).
struct Capabilities {
  // kDiscard, and kWriteZeroes with kIoMayUnmap, free storage. False (discard=ignore): discards
  // complete without effect and kIoMayUnmap is ignored, so zeroed ranges stay allocated.
  bool discard = true;
  // kWriteZeroes is carried out, natively or by writing zeroes. False: users answer EOPNOTSUPP.
  bool write_zeroes = true;
  // kBlockStatus tells holes from data. False: every extent would report data, so asking tells
  // nothing.
  bool block_status = true;
  // kFlush has something to make durable. False: nothing written is volatile, or the node gave
  // durability up (cache.no-flush), so a flush may be answered without the node.
  bool flush = true;
  // kIoFua makes the write itself durable. False: a write that must be durable needs a kFlush
  // after it.
  bool fua = true;
  // kAllocate reserves storage (or has none to reserve: thin remote images). False: it answers
  // EOPNOTSUPP, so users refuse a reservation before changing anything else.
  bool allocate = true;
  // Truncate() can change the size. False: it always fails, so users refuse size changes up
  // front.
  bool resize = true;
  // Truncate() takes only multiples of this (qcow2 keeps QEMU's rule of whole 512-byte sectors);
  // a write that grows the node grows it to the next multiple.
  uint32_t size_alignment = 1;
};

struct HostFile {
  int fd = -1;                // open as long as the node; not to be closed
  bool block_device = false;  // its size is fixed: a write past the end fails instead of growing it
};

class BlockNode {
 public:
  virtual ~BlockNode() = default;
  const std::string& node_name() const { return node_name_; }
  virtual std::string driver_name() const = 0;
  // Current size in bytes; safe from any thread.
  virtual uint64_t size() const = 0;
  virtual bool read_only() const = 0;
  // Offsets, lengths and buffer addresses that need no bounce buffer are multiples of this.
  virtual uint32_t request_alignment() const { return 1; }
  // What the node can do; fixed once the node is open. Any thread.
  virtual Capabilities capabilities() const { return {}; }
  // Resizes the node (truncate or grow). Control path: may block; safe from any thread. Failures
  // carry the code of the errno a file would answer (absl::ErrnoToStatus for the kernel's own;
  // fuse/status_errno.h maps them back): a node that cannot resize (capabilities().resize false)
  // kPermissionDenied (EPERM), a size too large kOutOfRange (EFBIG).
  virtual absl::Status Truncate(uint64_t new_size) = 0;
  // Truncate() for the callers that decide from the current size (block_resize, an export's
  // truncate and its writes past the end), one at a time: a grow that read the size and then
  // truncated to its own end undid a larger resize that came in between (outside review: a
  // qcow2 node lost the block_resize just confirmed, and writes a second export had grown it
  // for). Resize() to exactly `new_size`; GrowTo() to at least `end`, a no-op if it is that big.
  absl::Status Resize(uint64_t new_size);
  absl::Status GrowTo(uint64_t end);
  // Creates an I/O context for the calling thread: the driver's queue, behind the generic
  // detect-zeroes check when the node has it on (block_node.cc).
  absl::StatusOr<std::unique_ptr<IoQueue>> CreateQueue();
  // A one-line description for logs (e.g. the file name and modes).
  virtual std::string description() const = 0;
  // The errno of the failed flush that makes every flush of this node fail from then on (the
  // file driver without O_DIRECT: its page cache can no longer be trusted), or 0. Any thread.
  virtual int flush_error() const { return 0; }
  // The image's name as QEMU reports it: the file's path, "null-co://", and for a format node
  // its file child's. Empty if the driver has none; query-named-block-nodes then shows the
  // file child's.
  virtual std::string filename() const { return {}; }
  // Bytes the image occupies on its storage (query-named-block-nodes' actual-size, an export's
  // st_blocks): a protocol node's own, a format node's file child's; nullopt if the driver cannot
  // tell (remote storage, a block device). A system call at most: any thread.
  virtual std::optional<uint64_t> AllocatedBytes() const { return std::nullopt; }

  // The node's bytes as one host file, offset for offset, for a client that does its own I/O on
  // it (FUSE passthrough); nullopt for nodes that map (formats, offsets) or are remote.
  virtual std::optional<HostFile> host_file() const { return std::nullopt; }
  // A client now does I/O on host_file() itself, through the host's page cache whatever the
  // node's cache mode: from now on a failed flush is sticky (see FileNode::SettleDurable) even
  // with cache.direct=on. Any thread.
  virtual void SharePageCache() {}
  // Re-reads the size after a client grew host_file() by writing past its end (only once
  // SharePageCache was called; a no-op before). Any thread.
  virtual void RefreshSize() {}

  // QEMU's detect-zeroes, a property of every node whatever its driver. Set by OpenBlockNode()
  // before the node is shared, so queues created later read it without a lock.
  DetectZeroes detect_zeroes() const { return detect_zeroes_; }
  void SetDetectZeroes(DetectZeroes mode) { detect_zeroes_ = mode; }

 protected:
  explicit BlockNode(std::string node_name) : node_name_(std::move(node_name)) {}
  // The driver's I/O context for the calling thread (CreateQueue() wraps it).
  virtual absl::StatusOr<std::unique_ptr<IoQueue>> CreateDriverQueue() = 0;

 private:
  std::string node_name_;
  DetectZeroes detect_zeroes_ = DetectZeroes::kOff;
  std::mutex size_change_mutex_;
};

}  // namespace bexd::block
