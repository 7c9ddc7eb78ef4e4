// SPDX-License-Identifier: GPL-2.0-or-later
// FUSE passthrough (Linux 6.9+): the kernel serves read, write, splice and mmap of an open file
// straight from a backing file the server registered, without a request to the server. One
// export has one backing file, its node's host file, registered while at least one passthrough
// open lives. Which exports may use it is the export's decision (export/fuse_dev/passthrough_
// setup.*); this is the session's bookkeeping of it. See docs/fuse-export.md#passthrough.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "util/unique_fd.h"

namespace bexd::fuse {

// Registers backing files with the kernel and drops them again: the transport's job (ioctls on
// its /dev/fuse descriptor). Any thread.
class BackingFiles {
 public:
  virtual ~BackingFiles() = default;
  // The backing id (> 0) the kernel gave `fd`.
  virtual absl::StatusOr<int32_t> Open(int fd) = 0;
  virtual absl::Status Close(int32_t backing_id) = 0;
};

class Passthrough {
 public:
  // `backing` is the node's host file, open read-only for a read-only export. `label` names the
  // export in logs.
  Passthrough(util::UniqueFd backing, std::string label)
      : backing_(std::move(backing)), label_(std::move(label)) {}
  Passthrough(const Passthrough&) = delete;
  Passthrough& operator=(const Passthrough&) = delete;

  // Once the transport can register backing files, before the first OPEN can arrive.
  void Attach(BackingFiles* files) { files_ = files; }

  // INIT: whether the kernel took FUSE_PASSTHROUGH. Without it every open is served by the
  // queues.
  void SetNegotiated(bool negotiated) { negotiated_.store(negotiated, std::memory_order_release); }
  bool negotiated() const { return negotiated_.load(std::memory_order_acquire); }

  // Registers the backing file and closes it again: proves at start that OPEN will be able to.
  absl::Status Probe();

  // OPEN: the backing id to answer with, or 0 to serve the open through the queues. The kernel
  // fails an open of an inode that has passthrough opens unless it is a passthrough open too
  // (fs/fuse/iomode.c), so once one open got passthrough, every open gets it until the last one
  // is released; and if registering ever fails, none does for the rest of the session.
  int32_t Open();
  // RELEASE of an open that Open() gave a backing id: the last one closes the id.
  void Release();
  // The export stops: closes the backing id if one is registered. The kernel drops it with the
  // connection anyway; this keeps a stop that leaves the connection open (none today) clean.
  void Detach();

  uint32_t open_files() const { return open_files_.load(std::memory_order_relaxed); }
  uint64_t opens() const { return opens_.load(std::memory_order_relaxed); }

 private:
  const util::UniqueFd backing_;
  const std::string label_;
  BackingFiles* files_ = nullptr;
  std::atomic<bool> negotiated_{false};

  std::mutex mutex_;  // OPEN and RELEASE only; never on the READ/WRITE path
  int32_t backing_id_ = 0;
  bool failed_ = false;
  std::atomic<uint32_t> open_files_{0};
  std::atomic<uint64_t> opens_{0};
};

}  // namespace bexd::fuse
