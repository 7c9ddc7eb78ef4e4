// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/vhost_user/vhost_user_channel.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace bexd::exports::vhost {
namespace {

// Waits until `socket_fd` is ready for `events` or `cancel_fd` is readable.
absl::Status WaitFor(int socket_fd, short events, int cancel_fd) {
  struct pollfd fds[2] = {{socket_fd, events, 0}, {cancel_fd, POLLIN, 0}};
  for (;;) {
    int n = poll(fds, cancel_fd >= 0 ? 2 : 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(fmt::format("poll: {}", strerror(errno)));
    if (cancel_fd >= 0 && (fds[1].revents & POLLIN)) return absl::CancelledError("cancelled");
    if (fds[0].revents != 0) return absl::OkStatus();
  }
}

// Moves the descriptors of SCM_RIGHTS control messages into `fds` (which closes them when the
// message is dropped). False if more than kMaxFds have arrived for this message.
bool TakeFds(struct msghdr* msg, std::vector<util::UniqueFd>* fds) {
  for (struct cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->emplace_back(fd);
    }
  }
  return fds->size() <= static_cast<size_t>(kMaxFds);
}

// Reads exactly `size` bytes, collecting descriptors that arrive with them. The peer may close
// the connection cleanly only before the first byte of a message (`at_start`).
absl::Status ReadFull(int socket_fd, int cancel_fd, void* data, size_t size, bool at_start,
                      std::vector<util::UniqueFd>* fds) {
  size_t done = 0;
  while (done < size) {
    if (absl::Status s = WaitFor(socket_fd, POLLIN, cancel_fd); !s.ok()) return s;
    struct iovec iov = {static_cast<char*>(data) + done, size - done};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(socket_fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(fmt::format("recvmsg: {}", strerror(errno)));
    }
    bool fds_ok = TakeFds(&msg, fds);
    if (msg.msg_flags & MSG_CTRUNC) {
      return absl::InvalidArgumentError("message carries more file descriptors than allowed");
    }
    if (!fds_ok) return absl::InvalidArgumentError("message carries too many file descriptors");
    if (n == 0) {
      if (at_start && done == 0) return absl::UnavailableError("peer closed the connection");
      return absl::InvalidArgumentError("peer closed the connection in the middle of a message");
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReceiveMessage(int socket_fd, int cancel_fd, Message* message) {
  message->fds.clear();
  if (absl::Status s =
          ReadFull(socket_fd, cancel_fd, &message->header, sizeof(Header), true, &message->fds);
      !s.ok()) {
    return s;
  }
  const Header& h = message->header;
  if ((h.flags & kVersionMask) != kVersion) {
    return absl::InvalidArgumentError(fmt::format("message {} has protocol version {}, expected {}",
                                                  h.request, h.flags & kVersionMask, kVersion));
  }
  if (h.size > kMaxPayload) {
    return absl::InvalidArgumentError(fmt::format(
        "message {} has a {}-byte payload, at most {} is allowed", h.request, h.size, kMaxPayload));
  }
  return ReadFull(socket_fd, cancel_fd, message->payload, h.size, false, &message->fds);
}

absl::Status SendMessage(int socket_fd, int cancel_fd, const Header& header, const void* payload,
                         size_t payload_size, const int* fds, int fd_count) {
  if (header.size != payload_size || payload_size > kMaxPayload || fd_count > kMaxFds) {
    return absl::InvalidArgumentError("malformed outgoing message");
  }
  unsigned char buffer[sizeof(Header) + kMaxPayload];
  memcpy(buffer, &header, sizeof(Header));
  if (payload_size > 0) memcpy(buffer + sizeof(Header), payload, payload_size);
  size_t total = sizeof(Header) + payload_size;
  size_t done = 0;
  while (done < total) {
    if (absl::Status s = WaitFor(socket_fd, POLLOUT, cancel_fd); !s.ok()) return s;
    struct iovec iov = {buffer + done, total - done};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (done == 0 && fd_count > 0) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
      struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
      memcpy(CMSG_DATA(c), fds, sizeof(int) * fd_count);
    }
    ssize_t n = sendmsg(socket_fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(fmt::format("sendmsg: {}", strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace bexd::exports::vhost
