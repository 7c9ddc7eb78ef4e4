// SPDX-License-Identifier: GPL-2.0-or-later
// Mountpoint checks shared by every FUSE export of the process: the path must be an existing
// regular file that no FUSE file system covers yet (a dead bexd mount left by a crash is detached
// first), and no two exports may claim the same file.
#pragma once

#include <absl/status/statusor.h>
#include <sys/types.h>

#include <optional>
#include <string>

namespace bexd::exports {

// Holds a process-wide claim on one mountpoint (its canonical path) until destroyed.
class MountpointClaim {
 public:
  // Detaches dead bexd mounts on the path, checks it and claims it. Errors name the path and say
  // what is wrong with it.
  static absl::StatusOr<MountpointClaim> Acquire(const std::string& mountpoint);
  MountpointClaim(MountpointClaim&& other) noexcept;
  MountpointClaim& operator=(MountpointClaim&& other) noexcept;
  MountpointClaim(const MountpointClaim&) = delete;
  MountpointClaim& operator=(const MountpointClaim&) = delete;
  ~MountpointClaim();

  // The canonical (absolute, symlink-free) path the claim holds.
  const std::string& path() const { return path_; }
  // Gives the claim up early (the file is no longer mounted).
  void Release();

 private:
  explicit MountpointClaim(std::string path) : path_(std::move(path)) {}

  std::string path_;
};

// The topmost mount whose mount point is `path` (canonical), from /proc/self/mountinfo.
struct MountEntry {
  dev_t device = 0;
  std::string fs_type;  // "fuse", "fuse.bexd", "ext4", ...
};
absl::StatusOr<std::optional<MountEntry>> TopMountAt(const std::string& path);

}  // namespace bexd::exports
