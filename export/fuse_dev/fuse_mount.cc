// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_dev/fuse_mount.h"

// libfuse API level: fuse_open_channel() and fuse_set_log_func() exist since 3.x.
#define FUSE_USE_VERSION 35

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse3/fuse.h>
#include <fuse3/fuse_log.h>
#include <linux/fuse.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "export/fuse_dev/fuse_mountpoint.h"
#include "util/log.h"

extern char** environ;

namespace bexd::exports {
namespace {

void ForwardLibfuseLog(enum fuse_log_level level, const char* format, va_list args) {
  char message[512];
  std::vsnprintf(message, sizeof(message), format, args);
  const std::string text(absl::StripTrailingAsciiWhitespace(message));
  if (level <= FUSE_LOG_WARNING) {
    log::Warn("libfuse: {}", text);
  } else {
    log::Debug("libfuse: {}", text);
  }
}

// libfuse prints to stderr by default; its messages explain mount failures, so send them to our
// log instead. The log function is process-wide.
void RouteLibfuseLog() {
  static std::once_flag once;
  std::call_once(once, [] { fuse_set_log_func(ForwardLibfuseLog); });
}

bool FuseConfAllowsOther() {
  std::ifstream conf("/etc/fuse.conf");
  std::string line;
  while (std::getline(conf, line)) {
    line = line.substr(0, line.find('#'));
    if (absl::StripAsciiWhitespace(line) == "user_allow_other") return true;
  }
  return false;
}

// The mount option parser splits on ',' and '=' and libfuse passes fsname to mount(2) as the
// source; keep the name to characters that need no escaping.
std::string SafeFsName(const std::string& name) {
  std::string safe = name;
  for (char& c : safe) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' &&
        c != ':') {
      c = '_';
    }
  }
  return safe;
}

absl::Status SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return absl::InternalError(
        absl::StrCat("cannot make a /dev/fuse descriptor non-blocking: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Non-root processes may not umount2(); fusermount3 (setuid) unmounts what the user mounted.
bool RunFusermountUnmount(const std::string& path) {
  const char* argv[] = {"fusermount3", "-u", "-q", "-z", "--", path.c_str(), nullptr};
  pid_t pid;
  int error =
      ::posix_spawnp(&pid, "fusermount3", nullptr, nullptr, const_cast<char**>(argv), environ);
  if (error != 0) {
    log::Error("cannot run fusermount3 to unmount '{}': {}", path, std::strerror(error));
    return false;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    log::Error("fusermount3 could not unmount '{}' (exit status {})", path, status);
    return false;
  }
  return true;
}

// What DetachAllMounts() detaches: each mount's path and device, from Create() to Unmount().
std::mutex live_mounts_mutex;
std::vector<std::pair<std::string, dev_t>> live_mounts;

void AddLiveMount(const std::string& path, dev_t device) {
  std::lock_guard lock(live_mounts_mutex);
  live_mounts.emplace_back(path, device);
}

void RemoveLiveMount(const std::string& path, dev_t device) {
  std::lock_guard lock(live_mounts_mutex);
  std::erase(live_mounts, std::pair(path, device));
}

}  // namespace

void DetachAllMounts() {
  std::lock_guard lock(live_mounts_mutex);
  for (const auto& [path, device] : live_mounts) {
    absl::StatusOr<std::optional<MountEntry>> top = TopMountAt(path);
    if (!top.ok() || !top->has_value() || (*top)->device != device) continue;
    if (absl::Status status = DetachMount(path); !status.ok()) {
      log::Error("{}", std::string(status.message()));
    }
  }
}

absl::Status DetachMount(const std::string& path) {
  if (::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) return absl::OkStatus();
  const int error = errno;
  if (error == EPERM && ::geteuid() != 0) {
    if (RunFusermountUnmount(path)) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat("cannot unmount '", path, "' (fusermount3 failed; see above)"));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot unmount '", path, "': ", std::strerror(error)));
}

absl::StatusOr<FuseMount> FuseMount::Create(const std::string& path,
                                            const FuseMountOptions& options) {
  RouteLibfuseLog();
  const std::string base =
      absl::StrCat(options.read_only ? "ro," : "", "default_permissions,subtype=", kBexdFsSubtype,
                   ",fsname=", SafeFsName(options.fs_name), ",max_read=", options.max_read);
  bool try_allow_other =
      options.allow_other == AllowOther::kOn ||
      (options.allow_other == AllowOther::kAuto && (::geteuid() == 0 || FuseConfAllowsOther()));
  bool allow_other = try_allow_other;
  int fd = ::fuse_open_channel(path.c_str(), (allow_other ? base + ",allow_other" : base).c_str());
  if (fd < 0 && allow_other && options.allow_other == AllowOther::kAuto) {
    log::Info("mounting '{}' with allow_other failed; mounting it for this user only", path);
    allow_other = false;
    fd = ::fuse_open_channel(path.c_str(), base.c_str());
  }
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot mount FUSE on '", path, "'", allow_other ? " with allow_other" : "",
                     " (see the libfuse messages above; mounting needs root, or fusermount3 and a "
                     "mountpoint the user owns)"));
  }
  util::UniqueFd owned(fd);
  absl::StatusOr<std::optional<MountEntry>> top = TopMountAt(path);
  if (!top.ok() || !top->has_value()) {
    // Without the mount's device a later unmount could not tell our mount from another one, so
    // do not keep it.
    ::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
    return absl::InternalError(absl::StrCat(
        "mounted FUSE on '", path, "' but cannot find the mount in /proc/self/mountinfo",
        top.ok() ? "" : absl::StrCat(": ", top.status().message())));
  }
  FuseMount mount(path, std::move(owned), (*top)->device, allow_other);
  AddLiveMount(path, mount.device_);
  if (absl::Status status = SetNonBlocking(mount.fd_.get()); !status.ok()) return status;
  return mount;
}

FuseMount::FuseMount(FuseMount&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::move(other.fd_)),
      device_(other.device_),
      allow_other_(other.allow_other_),
      mounted_(std::exchange(other.mounted_, false)),
      unmounted_from_outside_(other.unmounted_from_outside_) {}

FuseMount::~FuseMount() { Unmount(); }

absl::StatusOr<std::vector<util::UniqueFd>> FuseMount::OpenQueues(uint32_t count) {
  if (!fd_) return absl::FailedPreconditionError("the mount's queues were opened already");
  std::vector<util::UniqueFd> fds;
  fds.reserve(count);
  uint32_t session_fd = static_cast<uint32_t>(fd_.get());
  fds.push_back(std::move(fd_));
  for (uint32_t i = 1; i < count; ++i) {
    util::UniqueFd clone(::open("/dev/fuse", O_RDWR | O_CLOEXEC | O_NONBLOCK));
    if (!clone) {
      return absl::UnavailableError(
          absl::StrCat("cannot open /dev/fuse for queue ", i, ": ", std::strerror(errno)));
    }
    if (::ioctl(clone.get(), FUSE_DEV_IOC_CLONE, &session_fd) != 0) {
      return absl::UnavailableError(absl::StrCat("cannot clone the FUSE connection for queue ", i,
                                                 ": ", std::strerror(errno)));
    }
    fds.push_back(std::move(clone));
  }
  return fds;
}

void FuseMount::Unmount() {
  if (!mounted_) return;
  mounted_ = false;
  RemoveLiveMount(path_, device_);
  absl::StatusOr<std::optional<MountEntry>> top = TopMountAt(path_);
  if (!top.ok()) {
    log::Error("not unmounting '{}': {}", path_, std::string(top.status().message()));
    return;
  }
  // An outside umount (or fusermount -u) got there first; what is mounted there now, if
  // anything, is not ours to remove.
  if (!top->has_value() || (*top)->device != device_) {
    log::Info("'{}' was already unmounted", path_);
    unmounted_from_outside_ = true;
    return;
  }
  if (::umount2(path_.c_str(), UMOUNT_NOFOLLOW) == 0) return;
  if (errno == EBUSY) {
    // Open files or a working directory keep the file system busy: detach it from the path now;
    // the kernel fails its remaining users' requests once our descriptors close.
    log::Info("'{}' is busy; detaching it lazily", path_);
  } else if (errno != EPERM) {
    log::Error("cannot unmount '{}': {}", path_, std::strerror(errno));
    return;
  }
  if (absl::Status status = DetachMount(path_); !status.ok()) {
    log::Error("{}", std::string(status.message()));
  }
}

}  // namespace bexd::exports
