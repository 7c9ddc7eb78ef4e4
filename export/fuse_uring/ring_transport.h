// SPDX-License-Identifier: GPL-2.0-or-later
// The FUSE-over-io_uring transport of one kernel ring queue
// (docs/fuse-export.md#fuse-over-io_uring). The kernel has one queue per possible CPU and puts each
// request on the queue of the CPU that issued it. This transport owns the queue's io_uring (created
// on the queue thread, which pins itself to that CPU) and its ring entries: each entry is a header
// buffer and a payload buffer registered with FUSE_IO_URING_CMD_REGISTER. A request arrives as the
// completion of an entry's command; its reply goes back, and the entry's next request is asked for,
// with one FUSE_IO_URING_CMD_COMMIT_AND_FETCH. It runs on the queue-thread skeleton
// (export/queue/queue_thread.h) with one request slot per entry.
//
// An idle queue (no request in flight) submits its commits and waits for the next request in one
// io_uring_enter; a busy one submits after each batch of completions and waits in epoll for the
// ring and its IoQueue together.
#pragma once

#include <absl/status/statusor.h>
#include <liburing.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "export/fuse_uring/ring_buffers.h"
#include "export/queue/queue_thread.h"
#include "export/queue/transport.h"
#include "fuse/session.h"

namespace bexd::exports {

class FuseRingTransport final : public QueueTransport {
 public:
  // Entries per queue: at least 1; more is a configuration mistake, not a need.
  static constexpr uint32_t kMaxDepth = 1024;

  // Called once on the queue thread as its run ends: failed is true if it ended on its own (the
  // FUSE connection went away, or the kernel misbehaved) rather than because a stop asked it to.
  using ExitFn = std::function<void(uint16_t queue, bool failed)>;

  // The transport of kernel queue `queue` with `depth` entries, for the connection of `device`
  // (any of its /dev/fuse descriptors; it must stay open for the run).
  static absl::StatusOr<std::unique_ptr<FuseRingTransport>> Create(uint16_t queue, uint32_t depth,
                                                                   const fuse::Session& session,
                                                                   int device, ExitFn on_exit);
  ~FuseRingTransport() override;

  uint32_t depth() const { return depth_; }

  // Creates the ring and registers every entry; fails with the kernel's reason if it refuses one.
  absl::Status Attach(QueueThread& thread) override;
  Fetched Fetch(QueueThread& thread, bool idle) override;
  void Reply(uint32_t slot, int64_t result) override;
  void Flush() override;
  bool PrepareToSleep(QueueThread& thread) override;
  bool BlocksWhenIdle() const override { return true; }
  // Submits the last commits, then closes the ring (the kernel cancels the entries' commands).
  void Detach(bool failed) override;

 private:
  static constexpr uint64_t kRingTag = 1;

  FuseRingTransport(uint16_t queue, uint32_t depth, int device, RingBuffers buffers,
                    ExitFn on_exit);
  absl::Status Register();
  // Fills an SQE for `entry`'s command. The SQ ring has room for one per entry and an entry has
  // one command at a time, so false (no room) means that rule was broken.
  bool PrepareCommand(uint32_t entry, uint32_t command);
  // Hands prepared commands to the kernel; false if the ring failed.
  bool Submit();
  // Takes the completions there are while slots are free. False once the ring has ended.
  bool Reap();
  // Hands the request the kernel put in `entry` to the core.
  void Dispatch(uint32_t entry);
  void EndRing(int error);
  void CloseRing();

  const uint16_t queue_;
  const uint32_t depth_;
  const int device_;
  RingBuffers buffers_;
  ExitFn on_exit_;
  struct io_uring ring_ = {};
  bool ring_open_ = false;
  bool ended_ = false;             // the kernel ended the ring's commands
  uint32_t unsubmitted_ = 0;       // commands prepared but not yet handed to the kernel
  QueueThread* thread_ = nullptr;  // during a run
  // Per entry: the REGISTER command's two iovecs, the request's iovecs for the core (header,
  // argument struct, payload), the reply's (out header, payload), and the commit id.
  std::unique_ptr<struct iovec[]> register_iov_;
  std::unique_ptr<struct iovec[]> in_;
  std::unique_ptr<struct iovec[]> out_;
  std::unique_ptr<uint64_t[]> commit_id_;
  // Per slot: the entry whose request it holds. A slot is free whenever an entry's command is
  // with the kernel, so a completion always finds one.
  std::unique_ptr<uint32_t[]> slot_entry_;
};

}  // namespace bexd::exports
