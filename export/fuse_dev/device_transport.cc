// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_dev/device_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <utility>

#include "util/log.h"
#include "util/rate_limit.h"
#include "util/status.h"

namespace bexd::exports {

absl::StatusOr<std::unique_ptr<FuseDeviceTransport>> FuseDeviceTransport::Create(
    uint32_t index, const fuse::Session& session, util::UniqueFd device, ExitFn on_exit) {
  absl::StatusOr<FuseSlotBuffers> buffers =
      FuseSlotBuffers::Create(kSlots, session.max_request_bytes(), session.max_reply_bytes());
  if (!buffers.ok()) return buffers.status();
  return std::unique_ptr<FuseDeviceTransport>(new FuseDeviceTransport(
      index, session, std::move(device), std::move(*buffers), std::move(on_exit)));
}

FuseDeviceTransport::FuseDeviceTransport(uint32_t index, const fuse::Session& session,
                                         util::UniqueFd device, FuseSlotBuffers buffers,
                                         ExitFn on_exit)
    : index_(index),
      session_(session),
      device_(std::move(device)),
      buffers_(std::move(buffers)),
      in_(new struct iovec[kSlots]),
      out_(new struct iovec[kSlots]),
      on_exit_(std::move(on_exit)) {
  for (uint32_t i = 0; i < kSlots; ++i) {
    in_[i] = {buffers_.request(i), 0};
    out_[i] = {buffers_.reply(i), buffers_.reply_capacity()};
  }
}

absl::Status FuseDeviceTransport::Attach(QueueThread& thread) {
  if (thread.slot_count() != kSlots) {
    return absl::InvalidArgumentError(
        fmt::format("the /dev/fuse transport has {} slots, not {}", kSlots, thread.slot_count()));
  }
  const int flags = ::fcntl(device_.get(), F_GETFL);
  if (flags < 0) return util::ErrnoStatus(errno, "fcntl(F_GETFL) of /dev/fuse");
  device_flags_ = flags & ~O_NONBLOCK;
  device_blocking_ = (flags & O_NONBLOCK) == 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    fuse::Request& request = thread.request(i);
    request.in = &in_[i];
    request.in_count = 1;
    request.out = &out_[i];
    request.out_count = 1;
  }
  thread_ = &thread;
  std::array<struct iovec, kSlots> slots;
  for (uint32_t i = 0; i < kSlots; ++i) slots[i] = buffers_.slot(i);
  thread.UseBuffers(slots);
  // Edge-triggered: a busy thread reads the device until EAGAIN and polls the IoQueue after every
  // wake-up, so it never needs a level reminder, and a busy queue that stopped reading (no free
  // slot) is not woken for requests another queue will take. Exclusive: all clones wait on the
  // one kernel input queue, and without it every request woke every queue thread, all but one
  // of them only to read EAGAIN (perf/README.md has the measurement and its command). The
  // kernel passes over exclusive entries whose thread is not in epoll_wait, so an idle thread in
  // its blocking read still gets its turn.
  return thread.loop().Watch(device_.get(), EPOLLIN | EPOLLET | EPOLLEXCLUSIVE, kDeviceTag);
}

QueueTransport::Fetched FuseDeviceTransport::Fetch(QueueThread& thread, bool idle) {
  if (idle) {
    // Only a request can give this thread work. Blocking readers wait in the kernel's queue
    // first come, first served, so idle queue threads take turns. An exclusive epoll entry keeps
    // the place it was registered at instead, so at queue depth 1 one queue took nearly every
    // request and more queues were no faster than one (perf/README.md has the measurement and its
    // command).
    if (ReadRequest(/*wait=*/true) == ReadResult::kEnded) {
      thread.EndServing(/*failed=*/true);
      return Fetched::kEmpty;
    }
    device_ready_ = true;  // more may wait behind it; read them only if it stays in flight
    return Fetched::kMore;
  }
  while (device_ready_ && thread.has_free_slot()) {
    const ReadResult result = ReadRequest(/*wait=*/false);
    if (result == ReadResult::kEmpty) device_ready_ = false;
    if (result == ReadResult::kEnded) {
      thread.EndServing(/*failed=*/true);
      return Fetched::kEmpty;
    }
  }
  return device_ready_ ? Fetched::kMore : Fetched::kEmpty;
}

void FuseDeviceTransport::OnEvent(uint64_t tag, uint32_t /*events*/) {
  if (tag == kDeviceTag) device_ready_ = true;
}

bool FuseDeviceTransport::SetDeviceBlocking(bool blocking) {
  if (blocking == device_blocking_) return true;
  // The clone descriptor is this queue's own open file, so its flags concern no other queue.
  if (::fcntl(device_.get(), F_SETFL, blocking ? device_flags_ : device_flags_ | O_NONBLOCK) != 0) {
    log::Error("{}: cannot switch /dev/fuse to {} reads: {}", thread_->label(),
               blocking ? "blocking" : "non-blocking", std::strerror(errno));
    return false;
  }
  device_blocking_ = blocking;
  return true;
}

FuseDeviceTransport::ReadResult FuseDeviceTransport::ReadRequest(bool wait) {
  if (!SetDeviceBlocking(wait)) return ReadResult::kEnded;
  struct iovec& in = in_[thread_->next_slot()];
  const ssize_t n = ::read(device_.get(), in.iov_base, buffers_.request_capacity());
  if (n > 0) {
    in.iov_len = static_cast<size_t>(n);
    thread_->DispatchNext();
    return ReadResult::kTaken;
  }
  if (n < 0 && errno == EAGAIN) return ReadResult::kEmpty;
  if (n < 0 && errno == EINTR) return ReadResult::kRetry;
  if (n < 0 && errno == ENODEV) {
    // Unmounted, or the connection was aborted: no request will come again.
    log::Info("{}: the FUSE connection has ended", thread_->label());
  } else {
    log::Error("{}: reading /dev/fuse failed: {}", thread_->label(),
               n == 0 ? "end of file" : std::strerror(errno));
  }
  return ReadResult::kEnded;
}

void FuseDeviceTransport::Reply(uint32_t slot, int64_t result) {
  if (result < 0) {
    // The kernel waits for an answer the core could not build; only ending the connection
    // releases its caller.
    log::Error("{}: the kernel sent a malformed FUSE request ({}); shutting the export down",
               thread_->label(), std::strerror(static_cast<int>(-result)));
    thread_->EndServing(/*failed=*/true);
    return;
  }
  if (result == 0) return;
  // The reply must go to the descriptor the request came from: the kernel looks requests up in
  // the processing list of that clone.
  const auto bytes = static_cast<size_t>(result);
  const ssize_t n = ::write(device_.get(), out_[slot].iov_base, bytes);
  if (n == static_cast<ssize_t>(bytes)) {
    // Nothing but INIT is answered before the session is initialized, so the first reply after
    // is INIT's.
    if (after_init_reply_ && session_.initialized()) std::exchange(after_init_reply_, nullptr)();
    return;
  }
  if (n < 0 && (errno == ENOENT || errno == ENODEV)) {
    // ENOENT: the request was interrupted and the kernel forgot it; ENODEV: the connection ended.
    // A client that interrupts in a loop triggers this at will.
    static log::RateLimit undelivered;
    log::Limited(undelivered, log::Level::kDebug, "{}: reply not delivered: {}", thread_->label(),
                 std::strerror(errno));
    return;
  }
  log::Error("{}: writing a {}-byte reply failed: {}", thread_->label(), bytes,
             n < 0 ? std::string(std::strerror(errno)) : fmt::format("short write of {} bytes", n));
}

void FuseDeviceTransport::Detach(bool failed) {
  if (on_exit_) on_exit_(index_, failed);
}

}  // namespace bexd::exports
