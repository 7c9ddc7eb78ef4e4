#include "cli/pidfile.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <string_view>

namespace bexd::cli {
namespace {

absl::Status PidfileError(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(
      fmt::format("--pidfile '{}': {}: {}", path, what, std::strerror(errno)));
}

std::string ReadHolder(int fd) {
  char buffer[32] = {};
  ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  std::string_view text(buffer, n > 0 ? n : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  return text.empty() ? "unknown" : std::string(text);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pidfile>> Pidfile::Acquire(const std::string& path) {
  // A daemon that exits unlinks the file while holding the lock; retry if we locked a file
  // that is no longer the one at `path`.
  for (int attempt = 0; attempt < 10; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return PidfileError(path, "open");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int error = errno;
      std::string holder = ReadHolder(fd);
      ::close(fd);
      if (error == EWOULDBLOCK) {
        return absl::FailedPreconditionError(
            fmt::format("--pidfile '{}' is locked by a running bexd (pid {})", path, holder));
      }
      errno = error;
      return PidfileError(path, "flock");
    }
    struct stat opened, current;
    if (::fstat(fd, &opened) == 0 && ::stat(path.c_str(), &current) == 0 &&
        opened.st_ino == current.st_ino && opened.st_dev == current.st_dev) {
      // Whatever the file holds is a dead process's pid. Emptied now, it reads empty until the
      // exports are up and then holds the whole pid, never a stale or a half-written one.
      if (::ftruncate(fd, 0) != 0) {
        absl::Status error = PidfileError(path, "truncate");
        ::close(fd);
        return error;
      }
      return std::unique_ptr<Pidfile>(new Pidfile(path, fd));
    }
    ::close(fd);
  }
  return absl::UnavailableError(
      fmt::format("--pidfile '{}': the file keeps being replaced; giving up", path));
}

Pidfile::~Pidfile() {
  ::unlink(path_.c_str());
  ::close(fd_);
}

absl::Status Pidfile::WritePid() {
  std::string content = fmt::format("{}\n", ::getpid());
  if (::pwrite(fd_, content.data(), content.size(), 0) != static_cast<ssize_t>(content.size())) {
    return PidfileError(path_, "write");
  }
  return absl::OkStatus();
}

}  // namespace bexd::cli
