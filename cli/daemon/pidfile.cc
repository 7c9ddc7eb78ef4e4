// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/pidfile.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

namespace bexd::cli {
namespace {

absl::Status PidfileError(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(
      fmt::format("--pidfile '{}': {}: {}", path, what, std::strerror(errno)));
}

absl::Status Refused(const std::string& path, std::string_view why) {
  return absl::FailedPreconditionError(fmt::format("--pidfile '{}': {}", path, why));
}

// The file's first bytes, without trailing newlines and spaces.
std::string ReadContent(int fd) {
  char buffer[32] = {};
  ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  std::string_view text(buffer, n > 0 ? n : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  return std::string(text);
}

std::string ReadHolder(int fd) {
  std::string holder = ReadContent(fd);
  return holder.empty() ? "unknown" : holder;
}

// Empty (a new file, or a daemon that died before it served) or a pid a daemon wrote: the file
// may be taken over. Anything else is someone's file put at the wrong path.
bool HoldsAPidOrNothing(int fd, const struct stat& st) {
  constexpr off_t kLongestPidLine = 16;
  if (st.st_size > kLongestPidLine) return false;
  std::string content = ReadContent(fd);
  return std::all_of(content.begin(), content.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pidfile>> Pidfile::Acquire(const std::string& path) {
  // A daemon that exits unlinks the file while holding the lock; retry if we locked a file
  // that is no longer the one at `path`.
  for (int attempt = 0; attempt < 10; ++attempt) {
    // O_NOFOLLOW: a symlink planted at the path must not make us truncate its target.
    // O_NONBLOCK: opening a FIFO or a device must not wait.
    util::UniqueFd fd(
        ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644));
    if (!fd) {
      if (errno == ELOOP) return Refused(path, "is a symbolic link; refusing to follow it");
      if (errno == EISDIR) return Refused(path, "is not a regular file");
      return PidfileError(path, "open");
    }
    struct stat opened;
    if (::fstat(fd.get(), &opened) != 0) return PidfileError(path, "stat");
    if (!S_ISREG(opened.st_mode)) return Refused(path, "is not a regular file");
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      int error = errno;
      if (error == EWOULDBLOCK) {
        return absl::FailedPreconditionError(fmt::format(
            "--pidfile '{}' is locked by a running bexd (pid {})", path, ReadHolder(fd.get())));
      }
      errno = error;
      return PidfileError(path, "flock");
    }
    struct stat current;
    if (::fstat(fd.get(), &opened) == 0 && ::lstat(path.c_str(), &current) == 0 &&
        opened.st_ino == current.st_ino && opened.st_dev == current.st_dev) {
      if (!HoldsAPidOrNothing(fd.get(), opened)) {
        return Refused(path, "holds something other than a pid; refusing to overwrite it");
      }
      // Whatever the file holds is a dead process's pid. Emptied now, it reads empty until the
      // exports are up and then holds the whole pid, never a stale or a half-written one.
      if (::ftruncate(fd.get(), 0) != 0) return PidfileError(path, "truncate");
      return std::unique_ptr<Pidfile>(new Pidfile(path, std::move(fd)));
    }
  }
  return absl::UnavailableError(
      fmt::format("--pidfile '{}': the file keeps being replaced; giving up", path));
}

Pidfile::~Pidfile() {
  // Unlinked while still locked, so no other daemon can lock the file that is about to go.
  ::unlink(path_.c_str());
}

absl::Status Pidfile::WritePid() {
  std::string content = fmt::format("{}\n", ::getpid());
  if (::pwrite(fd_.get(), content.data(), content.size(), 0) !=
      static_cast<ssize_t>(content.size())) {
    return PidfileError(path_, "write");
  }
  return absl::OkStatus();
}

}  // namespace bexd::cli
