// SPDX-License-Identifier: GPL-2.0-or-later
// A FUSE file system mounted on a regular file. libfuse does the mounting (directly as root,
// through fusermount3 otherwise); bexd reads the /dev/fuse descriptors itself.
#pragma once

#include <absl/status/statusor.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "export/options.h"
#include "util/unique_fd.h"

namespace bexd::exports {

// bexd's mounts show in /proc/self/mountinfo with type "fuse." followed by this.
inline constexpr char kBexdFsSubtype[] = "bexd";

// Detaches whatever is mounted on `path` at once (lazily: its users keep it until they let go),
// through fusermount3 when not root.
absl::Status DetachMount(const std::string& path);

// Detaches every file system this process mounted and has not unmounted, where the mount at its
// path is still the one it made. For an exit that does not wait for the exports to stop: their
// mountpoints are left usable instead of failing with ENOTCONN until someone unmounts them.
void DetachAllMounts();

struct FuseMountOptions {
  std::string fs_name;  // the mount's source in /proc/mounts
  AllowOther allow_other = AllowOther::kAuto;
  size_t max_read = 0;  // largest READ the kernel may send
  // Mounted read-only ("ro"): the kernel refuses every change (open for writing, chmod, touch,
  // truncate) with EROFS before asking bexd, and access(W_OK) and statvfs say so, as for QSD.
  bool read_only = false;
};

class FuseMount {
 public:
  // Mounts on `path` (canonical, an existing regular file). The mount's /dev/fuse descriptor is
  // kept for OpenQueues().
  static absl::StatusOr<FuseMount> Create(const std::string& path, const FuseMountOptions& options);
  FuseMount(FuseMount&& other) noexcept;
  FuseMount& operator=(FuseMount&&) = delete;
  FuseMount(const FuseMount&) = delete;
  FuseMount& operator=(const FuseMount&) = delete;
  ~FuseMount();  // Unmount()

  const std::string& path() const { return path_; }
  bool allow_other() const { return allow_other_; }

  // The connection's descriptors, all non-blocking: the mount's own, then `count - 1` clones
  // (FUSE_DEV_IOC_CLONE). The kernel feeds every descriptor from the one request queue; a reply
  // must be written to the descriptor its request was read from. Call once.
  absl::StatusOr<std::vector<util::UniqueFd>> OpenQueues(uint32_t count);

  // Detaches the file system from the path, lazily if it is busy, unless it is gone already (an
  // outside umount). Requests waiting in the kernel fail once every queue descriptor is closed.
  // Idempotent.
  void Unmount();
  // True once Unmount() found the file system gone already.
  bool unmounted_from_outside() const { return unmounted_from_outside_; }

 private:
  FuseMount(std::string path, util::UniqueFd fd, dev_t device, bool allow_other)
      : path_(std::move(path)), fd_(std::move(fd)), device_(device), allow_other_(allow_other) {}

  std::string path_;
  util::UniqueFd fd_;
  dev_t device_ = 0;  // the FUSE connection's device, to recognise our mount in mountinfo
  bool allow_other_ = false;
  bool mounted_ = true;
  bool unmounted_from_outside_ = false;
};

}  // namespace bexd::exports
