// SPDX-License-Identifier: GPL-2.0-or-later
#include "util/unix_socket_listener.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "util/log.h"

namespace bexd::exports {
namespace {

absl::Status PathError(const std::string& path, std::string_view what, int error) {
  return absl::InvalidArgumentError(
      fmt::format("socket '{}': {}: {}", path, what, std::strerror(error)));
}

absl::Status Refused(const std::string& path, std::string_view why) {
  return absl::FailedPreconditionError(fmt::format("socket '{}': {}", path, why));
}

int OpenReserve() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Makes `path` free for bind(): nothing is there, or a socket file nobody answers on, which is
// removed. A server that answers, or a file of another kind, is refused.
absl::Status ClearStaleSocket(const sockaddr_un& address, const std::string& path) {
  struct stat before;
  if (::lstat(path.c_str(), &before) != 0) {
    return errno == ENOENT ? absl::OkStatus() : PathError(path, "cannot stat the path", errno);
  }
  if (!S_ISSOCK(before.st_mode)) {
    return Refused(path, "the path exists and is not a socket");
  }
  // Non-blocking, so a listener with a full backlog answers EAGAIN instead of blocking us.
  util::UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe) return PathError(path, "cannot create a socket to probe it", errno);
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 ||
      errno == EAGAIN) {
    return Refused(path,
                   "a server is listening on it (another bexd, or another export or monitor); "
                   "stop it or choose another path");
  }
  if (errno == ENOENT) return absl::OkStatus();  // removed meanwhile
  if (errno == EPROTOTYPE) return Refused(path, "a socket of another type is bound to it");
  if (errno != ECONNREFUSED) {
    return PathError(path, "cannot tell whether a server listens on it", errno);
  }
  // Nobody listens: the socket of a process that is gone. Remove it only if the path still names
  // the file just probed, not one a starting server put there meanwhile.
  struct stat now;
  if (::lstat(path.c_str(), &now) != 0) {
    return errno == ENOENT ? absl::OkStatus() : PathError(path, "cannot stat the path", errno);
  }
  if (!SameFile(before, now)) return Refused(path, "the file was replaced while probing it");
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return PathError(path, "cannot remove the stale socket file", errno);
  }
  log::Info("socket '{}': replaced a stale socket file that nobody listened on", path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UnixSocketListener> UnixSocketListener::Listen(const std::string& path,
                                                              int backlog) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(fmt::format("socket '{}': the path must have 1 to {} bytes",
                                                  path, sizeof(address.sun_path) - 1));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  if (absl::Status status = ClearStaleSocket(address, path); !status.ok()) return status;
  util::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return PathError(path, "cannot create a socket", errno);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return PathError(path, "cannot bind", errno);
  }
  struct stat bound;
  if (::lstat(path.c_str(), &bound) != 0) {
    // Without the file's identity Close() could not tell it from a later one: do not keep it.
    absl::Status status = PathError(path, "cannot stat the socket just bound", errno);
    ::unlink(path.c_str());
    return status;
  }
  UnixSocketListener listener(path, std::move(fd), bound.st_dev, bound.st_ino);
  if (::listen(listener.fd(), backlog) != 0) return PathError(path, "cannot listen", errno);
  return listener;
}

UnixSocketListener::UnixSocketListener(std::string path, util::UniqueFd fd, dev_t device,
                                       ino_t inode)
    : path_(std::move(path)),
      fd_(std::move(fd)),
      device_(device),
      inode_(inode),
      reserve_(OpenReserve()) {}

UnixSocketListener::UnixSocketListener(UnixSocketListener&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::move(other.fd_)),
      device_(other.device_),
      inode_(other.inode_),
      reserve_(std::move(other.reserve_)) {}

UnixSocketListener& UnixSocketListener::operator=(UnixSocketListener&& other) noexcept {
  if (this != &other) {
    Close();
    path_ = std::move(other.path_);
    fd_ = std::move(other.fd_);
    device_ = other.device_;
    inode_ = other.inode_;
    reserve_ = std::move(other.reserve_);
  }
  return *this;
}

absl::StatusOr<util::UniqueFd> UnixSocketListener::Accept(absl::FunctionRef<void(int fd)> shed) {
  for (;;) {
    util::UniqueFd connection(::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (connection) return connection;
    const int error = errno;
    if (error == EINTR || error == ECONNABORTED) continue;
    if (error == EAGAIN || error == EWOULDBLOCK) {
      return absl::UnavailableError(fmt::format("socket '{}': no connection is pending", path_));
    }
    if (error != EMFILE && error != ENFILE) {
      return absl::InternalError(
          fmt::format("socket '{}': accept: {}", path_, std::strerror(error)));
    }
    if (!reserve_) reserve_ = util::UniqueFd(OpenReserve());
    if (!reserve_) {
      return absl::FailedPreconditionError(fmt::format(
          "socket '{}': out of file descriptors ({}), with none in reserve to refuse the client",
          path_, std::strerror(error)));
    }
    reserve_.Reset();
    util::UniqueFd refused(::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (refused) shed(refused.get());
    refused.Reset();
    reserve_ = util::UniqueFd(OpenReserve());
    return absl::ResourceExhaustedError(
        fmt::format("socket '{}': out of file descriptors ({}); refused a client", path_,
                    std::strerror(error)));
  }
}

UnixSocketListener::~UnixSocketListener() { Close(); }

void UnixSocketListener::Close() {
  if (!fd_) return;
  // Removed while still listening, so no other server can take the path for a stale one and
  // replace it between the check and the unlink.
  struct stat now;
  if (::lstat(path_.c_str(), &now) == 0 && now.st_dev == device_ && now.st_ino == inode_) {
    ::unlink(path_.c_str());
  } else {
    log::Warn("socket '{}' no longer names the socket this process bound; leaving the path alone",
              path_);
  }
  fd_.Reset();
}

}  // namespace bexd::exports
