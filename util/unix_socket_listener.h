// SPDX-License-Identifier: GPL-2.0-or-later
// A listening unix stream socket that owns the file it is bound to. Both kinds of socket bexd
// serves (vhost-user-fs exports and QMP monitors) listen through it, so they refuse and replace
// socket files by the same rules (docs/control.md#socket-paths):
// - a socket file that something answers on belongs to a live server and is never replaced;
// - a socket file nobody answers on (left by a process that is gone) is replaced;
// - anything else at the path (regular file, directory, symlink, FIFO) is refused and kept;
// - on close, the file is removed only if the path still names the socket this listener bound.
// It lives in export/ because the exports need it and cli/ may use export/, not the reverse.
#pragma once

#include <absl/functional/function_ref.h>
#include <absl/status/statusor.h>
#include <sys/types.h>

#include <string>

#include "util/unique_fd.h"

namespace bexd::exports {

class UnixSocketListener {
 public:
  // Binds a non-blocking, close-on-exec socket to `path` and listens with `backlog`. Errors name
  // the path and say why.
  static absl::StatusOr<UnixSocketListener> Listen(const std::string& path, int backlog);
  UnixSocketListener() = default;  // listens on nothing
  UnixSocketListener(UnixSocketListener&& other) noexcept;
  UnixSocketListener& operator=(UnixSocketListener&& other) noexcept;
  UnixSocketListener(const UnixSocketListener&) = delete;
  UnixSocketListener& operator=(const UnixSocketListener&) = delete;
  ~UnixSocketListener();  // Close()

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

  // Accepts one pending connection, non-blocking and close-on-exec. Unavailable when none is
  // pending. When the process is out of descriptors the listener would stay readable and a poll
  // loop spin on it, so the pending connection is accepted into a descriptor held in reserve,
  // handed to `shed` (which may write a last line to it) and closed: ResourceExhausted, and the
  // caller may accept again. FailedPrecondition when even the reserve is gone: the caller should
  // stop polling the listener until it has closed a descriptor of its own.
  absl::StatusOr<util::UniqueFd> Accept(absl::FunctionRef<void(int fd)> shed);

  // Stops listening and removes the socket file, unless the path now names another file (a
  // process that replaced the socket owns what is there). Idempotent.
  void Close();

 private:
  UnixSocketListener(std::string path, util::UniqueFd fd, dev_t device, ino_t inode);

  std::string path_;
  util::UniqueFd fd_;
  // The socket file bind() created, to recognise it on Close().
  dev_t device_ = 0;
  ino_t inode_ = 0;
  util::UniqueFd reserve_;  // /dev/null, given up to shed a connection when out of descriptors
};

}  // namespace bexd::exports
