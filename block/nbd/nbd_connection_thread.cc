// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/nbd/nbd_connection_thread.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "block/nbd/nbd_shared_queue.h"
#include "util/eventfd.h"
#include "util/log.h"

namespace bexd::block {
namespace {

enum Tag : uint32_t { kInboxTag, kStopTag, kConnectionTag };

}  // namespace

absl::StatusOr<std::unique_ptr<NbdConnectionThread>> NbdConnectionThread::Start(
    const NbdNodeLink& link, NbdHandle handle) {
  std::unique_ptr<NbdConnectionThread> self(new NbdConnectionThread());
  absl::StatusOr<std::unique_ptr<NbdConnection>> connection =
      NbdConnection::Create(link, std::move(handle), &OnFinished, nullptr);
  if (!connection.ok()) return connection.status();
  self->connection_ = *std::move(connection);
  self->inbox_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  self->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  self->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (self->inbox_fd_ < 0 || self->stop_fd_ < 0 || self->epoll_fd_ < 0) {
    return absl::ErrnoToStatus(
        errno, fmt::format("node '{}': cannot create the NBD connection thread's descriptors",
                           link.node_name));
  }
  for (auto [fd, tag] : {std::pair{self->inbox_fd_, kInboxTag}, std::pair{self->stop_fd_, kStopTag},
                         std::pair{self->connection_->wait_fd(), kConnectionTag}}) {
    struct epoll_event event = {.events = EPOLLIN, .data = {.u32 = tag}};
    if (epoll_ctl(self->epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      return absl::ErrnoToStatus(
          errno, fmt::format("node '{}': cannot watch the NBD connection", link.node_name));
    }
  }
  try {
    self->thread_ = std::thread([raw = self.get()] { raw->Loop(); });
  } catch (const std::system_error& error) {
    return absl::ResourceExhaustedError(fmt::format(
        "node '{}': cannot start the NBD connection thread: {}", link.node_name, error.what()));
  }
  pthread_setname_np(self->thread_.native_handle(), "bexd-nbd");
  return self;
}

NbdConnectionThread::~NbdConnectionThread() {
  if (thread_.joinable()) {
    util::SignalEventFd(stop_fd_);
    thread_.join();
  }
  connection_.reset();
  for (int fd : {inbox_fd_, stop_fd_, epoll_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void NbdConnectionThread::Wake() { util::SignalEventFd(inbox_fd_); }

void NbdConnectionThread::Loop() {
  struct epoll_event events[3];
  while (true) {
    const int count = epoll_wait(epoll_fd_, events, 3, -1);
    if (count < 0 && errno != EINTR) {
      log::Error("the NBD connection thread's epoll_wait failed: {}", std::strerror(errno));
      return;
    }
    for (int i = 0; i < count; ++i) {
      if (events[i].data.u32 == kStopTag) return;
    }
    // The eventfd is cleared before the stack is taken: a request pushed after the take finds the
    // stack empty and signals again.
    util::DrainEventFd(inbox_fd_);
    RequestList handed;
    inbox_.TakeAll(&handed);
    while (IoRequest* request = handed.PopFront()) connection_->Start(request);
    connection_->Process();
  }
}

void NbdConnectionThread::OnFinished(void* context, IoRequest* request, int64_t result) {
  DriverState<NbdRequestState>(request)->origin->Return(request);
}

}  // namespace bexd::block
