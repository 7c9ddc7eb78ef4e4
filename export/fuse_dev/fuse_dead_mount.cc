// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_dev/fuse_dead_mount.h"

#include <absl/strings/str_cat.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "export/fuse_dev/fuse_mount.h"
#include "export/fuse_dev/fuse_mountpoint.h"
#include "util/log.h"
#include "util/unique_fd.h"

namespace bexd::exports {
namespace {

// A server that has not answered one GETATTR by then is taken for alive (busy or hung).
constexpr int kProbeTimeoutMs = 10'000;
// Exit statuses of the probe process.
constexpr int kAnswered = 0;
constexpr int kNotConnected = 1;
constexpr int kOtherError = 2;

// Whether the FUSE file system on `path` answers ENOTCONN. AT_STATX_FORCE_SYNC makes the kernel
// ask the server even while cached attributes are valid; a connection without a server fails at
// once. The request runs in a child process: a live server that does not answer would block the
// caller for good, and only a killed process stops waiting for a FUSE reply.
absl::StatusOr<bool> AnswersNotConnected(const std::string& path) {
  const char* c_path = path.c_str();
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    struct statx attributes;
    if (::statx(AT_FDCWD, c_path, AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_TYPE,
                &attributes) == 0) {
      ::_exit(kAnswered);
    }
    ::_exit(errno == ENOTCONN ? kNotConnected : kOtherError);
  }
  // glibc 2.36's <sys/pidfd.h> lacks extern "C"; the system call is the same.
  util::UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  const int pidfd_error = pidfd ? 0 : errno;
  bool exited = false;
  if (pidfd) {
    struct pollfd wait = {pidfd.get(), POLLIN, 0};
    int ready;
    while ((ready = ::poll(&wait, 1, kProbeTimeoutMs)) < 0 && errno == EINTR) {
    }
    exited = ready > 0;
    if (ready == 0) {
      log::Warn("the FUSE mount on '{}' did not answer within {} s; taking it for alive", path,
                kProbeTimeoutMs / 1000);
    }
  }
  if (!exited) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (pidfd_error != 0) {
    return absl::InternalError(absl::StrCat("pidfd_open: ", std::strerror(pidfd_error)));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == kNotConnected;
}

}  // namespace

absl::Status DetachDeadBexdMounts(const std::string& path) {
  const std::string bexd_fs_type = absl::StrCat("fuse.", kBexdFsSubtype);
  // Each pass removes one mount; a few stacked ones are the most a series of crashes leaves.
  for (int pass = 0; pass < 16; ++pass) {
    absl::StatusOr<std::optional<MountEntry>> top = TopMountAt(path);
    if (!top.ok()) return top.status();
    if (!top->has_value() || (*top)->fs_type != bexd_fs_type) return absl::OkStatus();
    absl::StatusOr<bool> dead = AnswersNotConnected(path);
    if (!dead.ok()) return dead.status();
    if (!*dead) return absl::OkStatus();
    log::Warn(
        "mountpoint '{}' holds the FUSE mount of a bexd that is gone (it answers ENOTCONN); "
        "detaching it",
        path);
    if (absl::Status status = DetachMount(path); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace bexd::exports
