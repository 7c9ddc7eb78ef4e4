// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuse/passthrough.h"

#include "util/log.h"

namespace bexd::fuse {

absl::Status Passthrough::Probe() {
  if (files_ == nullptr) return absl::FailedPreconditionError("no transport to register with");
  absl::StatusOr<int32_t> id = files_->Open(backing_.get());
  if (!id.ok()) return id.status();
  return files_->Close(*id);
}

int32_t Passthrough::Open() {
  if (!negotiated() || files_ == nullptr) return 0;
  std::lock_guard lock(mutex_);
  if (failed_) return 0;
  if (backing_id_ == 0) {
    absl::StatusOr<int32_t> id = files_->Open(backing_.get());
    if (!id.ok()) {
      // No passthrough open lives (backing_id_ is 0), so queue-served opens from now on cannot
      // meet one on the inode.
      failed_ = true;
      log::Warn("{}: passthrough off from now on: {}", label_, std::string(id.status().message()));
      return 0;
    }
    backing_id_ = *id;
  }
  open_files_.fetch_add(1, std::memory_order_relaxed);
  opens_.fetch_add(1, std::memory_order_relaxed);
  return backing_id_;
}

void Passthrough::Release() {
  std::lock_guard lock(mutex_);
  const uint32_t open = open_files_.load(std::memory_order_relaxed);
  if (open == 0) return;  // a RELEASE without its OPEN
  open_files_.store(open - 1, std::memory_order_relaxed);
  if (open > 1 || backing_id_ == 0) return;
  if (absl::Status status = files_->Close(backing_id_); !status.ok()) {
    log::Warn("{}: {}", label_, std::string(status.message()));
  }
  backing_id_ = 0;
}

void Passthrough::Detach() {
  std::lock_guard lock(mutex_);
  if (backing_id_ != 0 && files_ != nullptr) {
    if (absl::Status status = files_->Close(backing_id_); !status.ok()) {
      log::Debug("{}: {}", label_, std::string(status.message()));
    }
  }
  backing_id_ = 0;
  open_files_.store(0, std::memory_order_relaxed);
  files_ = nullptr;
}

}  // namespace bexd::fuse
