// SPDX-License-Identifier: GPL-2.0-or-later
#include "perf/responder_queue.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "util/eventfd.h"
#include "util/log.h"

namespace bexd::perf {

ResponderQueue::ResponderQueue(const Responder& responder, int fd, uint32_t index, int done_fd)
    : responder_(responder), fd_(fd), index_(index), done_fd_(done_fd) {
  thread_ = std::thread([this] { Run(); });
}

ResponderQueue::~ResponderQueue() { Join(); }

void ResponderQueue::Join() {
  if (thread_.joinable()) thread_.join();
}

void ResponderQueue::Run() {
  failed_.store(!Serve(), std::memory_order_release);
  util::SignalEventFd(done_fd_);
}

bool ResponderQueue::Serve() {
  const size_t buffer_size = responder_.RequestBufferSize();
  // Allocated once per queue; a request never allocates.
  auto buffer = std::make_unique_for_overwrite<std::byte[]>(buffer_size);
  Reply reply;
  uint64_t answered = 0;
  for (;;) {
    const ssize_t length = read(fd_, buffer.get(), buffer_size);
    if (length < 0) {
      // ENOENT: the request was interrupted before we got it; EINTR/EAGAIN: nothing read.
      if (errno == EINTR || errno == EAGAIN || errno == ENOENT) continue;
      if (errno == ENODEV) return true;  // unmounted or aborted: the normal end
      log::Error("queue {}: reading /dev/fuse failed: {}", index_, std::strerror(errno));
      return false;
    }
    responder_.Answer({buffer.get(), static_cast<size_t>(length)}, reply);
    if (reply.iov_count == 0) continue;
    if (writev(fd_, reply.iov, reply.iov_count) < 0) {
      // ENOENT: the kernel dropped the request (interrupted or aborted); nobody waits for it.
      if (errno == ENOENT) continue;
      if (errno == ENODEV) return true;
      log::Error("queue {}: writing a reply to /dev/fuse failed: {}", index_, std::strerror(errno));
      return false;
    }
    answered_.store(++answered, std::memory_order_relaxed);
  }
}

}  // namespace bexd::perf
