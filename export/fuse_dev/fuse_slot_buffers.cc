// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_dev/fuse_slot_buffers.h"

#include <absl/strings/str_cat.h>
#include <errno.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace bexd::exports {

absl::StatusOr<FuseSlotBuffers> FuseSlotBuffers::Create(size_t slots, size_t max_request_bytes,
                                                        size_t max_reply_bytes) {
  size_t data_bytes = std::max(max_request_bytes, max_reply_bytes);  // at least enough
  data_bytes = (data_bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  const size_t mapped_bytes = slots * (kPageBytes + data_bytes);
  // Pages are touched (and so allocated) only as large requests use them.
  void* base = ::mmap(nullptr, mapped_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot map ", mapped_bytes, " bytes of request buffers: ", std::strerror(errno)));
  }
  return FuseSlotBuffers(static_cast<uint8_t*>(base), mapped_bytes, data_bytes);
}

FuseSlotBuffers::FuseSlotBuffers(FuseSlotBuffers&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      mapped_bytes_(other.mapped_bytes_),
      data_bytes_(other.data_bytes_) {}

FuseSlotBuffers::~FuseSlotBuffers() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
}

}  // namespace bexd::exports
