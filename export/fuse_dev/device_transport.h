// SPDX-License-Identifier: GPL-2.0-or-later
// The /dev/fuse transport of one FUSE export queue: a clone of the mount's /dev/fuse descriptor,
// read into page-aligned slot buffers (fuse_slot_buffers.h), with each reply written back to the
// same descriptor. It runs on the queue-thread skeleton (export/queue/queue_thread.h).
//
// An idle queue (no request in flight) waits in a blocking read of its descriptor; a busy one
// reads without blocking and waits in epoll for the device and its IoQueue together.
#pragma once

#include <absl/status/statusor.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "export/fuse_dev/fuse_slot_buffers.h"
#include "export/queue/queue_thread.h"
#include "export/queue/transport.h"
#include "fuse/session.h"
#include "util/unique_fd.h"

namespace bexd::exports {

class FuseDeviceTransport final : public QueueTransport {
 public:
  // Request slots per queue: the kernel's background limit (64, set in the core's INIT reply)
  // plus room for synchronous requests. When every slot is busy the thread stops reading and the
  // kernel's shared input queue feeds the other queues.
  static constexpr uint32_t kSlots = 80;

  // Called once on the queue thread as its run ends: failed is true if it ended on its own (the
  // FUSE connection went away, or the kernel sent bytes that are not a FUSE request) rather than
  // because a stop asked it to.
  using ExitFn = std::function<void(uint32_t index, bool failed)>;

  static absl::StatusOr<std::unique_ptr<FuseDeviceTransport>> Create(uint32_t index,
                                                                     const fuse::Session& session,
                                                                     util::UniqueFd device,
                                                                     ExitFn on_exit);

  // Closes the /dev/fuse descriptor. Only once the run has ended.
  void CloseDevice() { device_.Reset(); }
  int device() const { return device_.get(); }

  // Runs `fn` once on the queue thread, after this queue's first reply once the session is
  // initialized: INIT's reply, or a later one, which the kernel sends only after taking INIT's.
  // From then on the kernel takes io_uring registrations and backing files. Before the run
  // begins.
  void CallAfterInitReply(std::function<void()> fn) { after_init_reply_ = std::move(fn); }

  absl::Status Attach(QueueThread& thread) override;
  Fetched Fetch(QueueThread& thread, bool idle) override;
  void Reply(uint32_t slot, int64_t result) override;
  void OnEvent(uint64_t tag, uint32_t events) override;
  bool BlocksWhenIdle() const override { return true; }
  void Detach(bool failed) override;

 private:
  enum class ReadResult { kTaken, kRetry, kEmpty, kEnded };
  static constexpr uint64_t kDeviceTag = 1;

  FuseDeviceTransport(uint32_t index, const fuse::Session& session, util::UniqueFd device,
                      FuseSlotBuffers buffers, ExitFn on_exit);
  ReadResult ReadRequest(bool wait);
  bool SetDeviceBlocking(bool blocking);

  const uint32_t index_;
  const fuse::Session& session_;
  util::UniqueFd device_;
  int device_flags_ = 0;  // its file status flags, without O_NONBLOCK
  bool device_blocking_ = false;
  // Edge-triggered, so assume requests wait until a read says EAGAIN.
  bool device_ready_ = true;
  FuseSlotBuffers buffers_;
  std::unique_ptr<struct iovec[]> in_;   // per slot: the request read
  std::unique_ptr<struct iovec[]> out_;  // per slot: room for the reply
  QueueThread* thread_ = nullptr;        // during a run
  ExitFn on_exit_;
  std::function<void()> after_init_reply_;
};

}  // namespace bexd::exports
