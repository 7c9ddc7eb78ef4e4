// SPDX-License-Identifier: GPL-2.0-or-later
// Reads and writes whole vhost-user messages on a connected unix socket, with their file
// descriptors (SCM_RIGHTS). Used by the backend and by the test frontend. Every wait also watches
// a cancel fd, so a peer that stops mid-message cannot hold the caller forever.
#pragma once

#include <absl/status/status.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "export/vhost_user/vhost_user_protocol.h"
#include "util/unique_fd.h"

namespace bexd::exports::vhost {

struct Message {
  Header header{};
  // Aligned for the 64-bit fields of the payloads PayloadAs() reads in place.
  alignas(8) unsigned char payload[kMaxPayload] = {};
  std::vector<util::UniqueFd> fds;  // what came along in the ancillary data, owned

  // The payload as T if it is exactly sizeof(T) bytes, else nullptr.
  template <typename T>
  const T* PayloadAs() const {
    return header.size == sizeof(T) ? reinterpret_cast<const T*>(payload) : nullptr;
  }
};

// Reads one message. Fails with kUnavailable when the peer closed the connection cleanly before a
// new message, kCancelled when `cancel_fd` became readable, and kInvalidArgument for a malformed
// message (bad version, payload larger than kMaxPayload, truncated ancillary data, more than
// kMaxFds descriptors); the connection is unusable after any failure.
absl::Status ReceiveMessage(int socket_fd, int cancel_fd, Message* message);

// Sends `header` (size must equal `payload_size`), the payload and `fds`.
absl::Status SendMessage(int socket_fd, int cancel_fd, const Header& header, const void* payload,
                         size_t payload_size, const int* fds = nullptr, int fd_count = 0);

}  // namespace bexd::exports::vhost
