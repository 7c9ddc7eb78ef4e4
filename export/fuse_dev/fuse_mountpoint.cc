// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_dev/fuse_mountpoint.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "export/fuse_dev/fuse_dead_mount.h"

namespace bexd::exports {
namespace {

std::mutex g_claims_mutex;
std::set<std::string>& Claims() {
  static auto* claims = new std::set<std::string>();
  return *claims;
}

// mountinfo escapes space, tab, newline and backslash in paths as \ooo (octal).
std::string UnescapeMountPath(std::string_view field) {
  std::string path;
  path.reserve(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && field.size() - i >= 4) {
      const char* digits = field.data() + i + 1;
      if (digits[0] >= '0' && digits[0] <= '3' && digits[1] >= '0' && digits[1] <= '7' &&
          digits[2] >= '0' && digits[2] <= '7') {
        path.push_back(
            static_cast<char>((digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0')));
        i += 3;
        continue;
      }
    }
    path.push_back(field[i]);
  }
  return path;
}

bool IsFuseType(const std::string& fs_type) {
  return fs_type == "fuse" || fs_type.rfind("fuse.", 0) == 0;
}

}  // namespace

absl::StatusOr<std::optional<MountEntry>> TopMountAt(const std::string& path) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  if (!mountinfo) {
    return absl::InternalError(
        absl::StrCat("cannot read /proc/self/mountinfo: ", std::strerror(errno)));
  }
  std::optional<MountEntry> top;
  std::string line;
  while (std::getline(mountinfo, line)) {
    // id parent major:minor root mount-point options [optional...] - fs-type source super-options
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() < 10 || UnescapeMountPath(fields[4]) != path) continue;
    size_t separator = 6;
    while (separator < fields.size() && fields[separator] != "-") ++separator;
    if (separator + 1 >= fields.size()) continue;
    std::vector<std::string> numbers = absl::StrSplit(fields[2], ':');
    unsigned major_number = 0, minor_number = 0;
    if (numbers.size() != 2 || !absl::SimpleAtoi(numbers[0], &major_number) ||
        !absl::SimpleAtoi(numbers[1], &minor_number)) {
      continue;
    }
    top = MountEntry{makedev(major_number, minor_number), fields[separator + 1]};
  }
  return top;
}

absl::StatusOr<MountpointClaim> MountpointClaim::Acquire(const std::string& mountpoint) {
  // Resolving the path reads no attributes of the file itself, so a dead FUSE mount on it
  // (answering ENOTCONN to stat) does not stop it; such a mount is cleared below.
  char* resolved = ::realpath(mountpoint.c_str(), nullptr);
  if (resolved == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("mountpoint '", mountpoint, "' cannot be used: ", std::strerror(errno)));
  }
  std::string path(resolved);
  ::free(resolved);

  std::lock_guard lock(g_claims_mutex);
  if (Claims().count(path) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("mountpoint '", path, "' is already used by another export"));
  }
  if (absl::Status status = DetachDeadBexdMounts(path); !status.ok()) return status;
  // Checked before stat(), which a FUSE server that does not answer would block.
  absl::StatusOr<std::optional<MountEntry>> top = TopMountAt(path);
  if (!top.ok()) return top.status();
  if (top->has_value() && IsFuseType((*top)->fs_type)) {
    return absl::AlreadyExistsError(absl::StrCat("mountpoint '", path,
                                                 "' is already a FUSE mount (", (*top)->fs_type,
                                                 "); unmount it first"));
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mountpoint '", mountpoint, "' cannot be used: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mountpoint '", mountpoint, "' is not a regular file"));
  }
  Claims().insert(path);
  return MountpointClaim(std::move(path));
}

MountpointClaim::MountpointClaim(MountpointClaim&& other) noexcept
    : path_(std::exchange(other.path_, std::string())) {}

MountpointClaim& MountpointClaim::operator=(MountpointClaim&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::exchange(other.path_, std::string());
  }
  return *this;
}

MountpointClaim::~MountpointClaim() { Release(); }

void MountpointClaim::Release() {
  if (path_.empty()) return;
  std::lock_guard lock(g_claims_mutex);
  Claims().erase(path_);
  path_.clear();
}

}  // namespace bexd::exports
