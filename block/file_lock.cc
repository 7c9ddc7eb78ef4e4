// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/file_lock.h"

#include <fcntl.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>

#include "util/log.h"

namespace bexd::block {
namespace {

// QEMU's layout: byte 100+p is read-locked by every holder of permission p, byte 200+p by every
// process that refuses to share p. A conflict is a lock on the opposite byte from someone else.
constexpr off_t kHeldBase = 100;
constexpr off_t kUnsharedBase = 200;

enum Permission { kConsistentRead = 0, kWrite = 1, kWriteUnchanged = 2, kResize = 3 };

const char* PermissionName(int permission) {
  switch (permission) {
    case kConsistentRead:
      return "consistent read";
    case kWrite:
      return "write";
    case kWriteUnchanged:
      return "write unchanged";
    case kResize:
      return "resize";
  }
  return "?";
}

struct flock OneByte(short type, off_t byte) {
  struct flock lock = {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = byte;
  lock.l_len = 1;
  return lock;
}

// 0, or the errno of F_OFD_SETLK.
int ReadLock(int fd, off_t byte) {
  struct flock lock = OneByte(F_RDLCK, byte);
  return fcntl(fd, F_OFD_SETLK, &lock) == 0 ? 0 : errno;
}

// 1 if another open file description holds a lock on `byte`, 0 if not, or -errno.
int LockedByOther(int fd, off_t byte) {
  struct flock lock = OneByte(F_WRLCK, byte);
  if (fcntl(fd, F_OFD_GETLK, &lock) != 0) return -errno;
  return lock.l_type == F_UNLCK ? 0 : 1;
}

bool Unsupported(int error) {
  return error == EINVAL || error == ENOLCK || error == EOPNOTSUPP || error == ENOSYS;
}

}  // namespace

absl::Status LockImage(int fd, std::string_view node_name, std::string_view filename, bool writable,
                       bool force_share, LockingMode mode) {
  if (mode == LockingMode::kOff) return absl::OkStatus();
  std::initializer_list<int> held_writable = {kConsistentRead, kWrite, kWriteUnchanged, kResize};
  std::initializer_list<int> held_read_only = {kConsistentRead};
  std::initializer_list<int> held = writable ? held_writable : held_read_only;
  std::initializer_list<int> refused = {kWrite, kResize};
  std::initializer_list<int> unshared = force_share ? std::initializer_list<int>{} : refused;

  auto failure = [&](int error) -> absl::Status {
    if (Unsupported(error) && mode == LockingMode::kAuto) {
      log::Warn("node '{}': cannot lock '{}' ({}); continuing without image locking", node_name,
                filename, std::strerror(error));
      return absl::OkStatus();
    }
    if (error == EAGAIN || error == EACCES) {
      return absl::UnavailableError(fmt::format(
          "node '{}': '{}' is locked by another process or node (locking=off skips this check)",
          node_name, filename));
    }
    return absl::ErrnoToStatus(error,
                               fmt::format("node '{}': cannot lock '{}'", node_name, filename));
  };

  for (int permission : held) {
    if (int error = ReadLock(fd, kHeldBase + permission)) return failure(error);
  }
  for (int permission : unshared) {
    if (int error = ReadLock(fd, kUnsharedBase + permission)) return failure(error);
  }
  auto conflict = [&](int permission, const char* what) {
    return absl::UnavailableError(fmt::format(
        "node '{}': '{}' is locked by another process or node, which {} the '{}' permission "
        "(locking=off skips this check)",
        node_name, filename, what, PermissionName(permission)));
  };
  for (int permission : held) {
    int locked = LockedByOther(fd, kUnsharedBase + permission);
    if (locked < 0) return failure(-locked);
    if (locked) return conflict(permission, "refuses to share");
  }
  for (int permission : unshared) {
    int locked = LockedByOther(fd, kHeldBase + permission);
    if (locked < 0) return failure(-locked);
    if (locked) return conflict(permission, "holds");
  }
  return absl::OkStatus();
}

}  // namespace bexd::block
