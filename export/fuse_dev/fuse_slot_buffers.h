// SPDX-License-Identifier: GPL-2.0-or-later
// The request and reply bytes of one FUSE queue thread's slots, in one anonymous mapping.
//
// Each slot has a header page followed by data pages. A request is read so that it ends the
// header page with exactly the 80 bytes of a WRITE's fuse_in_header + fuse_write_in, so WRITE
// payload starts on a page boundary; the reply is built 16 bytes (fuse_out_header) before the
// same boundary, so READ data lands page-aligned too. O_DIRECT backends then need no bounce
// buffer. The reply area aliases the request area, which the core allows (it copies what it needs
// from a request before writing its reply).
//
//   | header page                           | data pages ...                      |
//                        in ^        out ^  ^ page boundary: WRITE payload, READ data
#pragma once

#include <absl/status/statusor.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace bexd::exports {

class FuseSlotBuffers {
 public:
  static constexpr size_t kWriteHeaderBytes = 80;  // fuse_in_header + fuse_write_in
  static constexpr size_t kReplyHeaderBytes = 16;  // fuse_out_header

  // Room for `slots` slots, each holding a request of up to `max_request_bytes` and a reply of
  // up to `max_reply_bytes`.
  static absl::StatusOr<FuseSlotBuffers> Create(size_t slots, size_t max_request_bytes,
                                                size_t max_reply_bytes);
  FuseSlotBuffers(FuseSlotBuffers&& other) noexcept;
  FuseSlotBuffers& operator=(FuseSlotBuffers&&) = delete;
  FuseSlotBuffers(const FuseSlotBuffers&) = delete;
  FuseSlotBuffers& operator=(const FuseSlotBuffers&) = delete;
  ~FuseSlotBuffers();

  uint8_t* request(size_t slot) const { return DataStart(slot) - kWriteHeaderBytes; }
  size_t request_capacity() const { return kWriteHeaderBytes + data_bytes_; }
  uint8_t* reply(size_t slot) const { return DataStart(slot) - kReplyHeaderBytes; }
  size_t reply_capacity() const { return kReplyHeaderBytes + data_bytes_; }
  // Where the slot's request and reply lie (its header page and data pages); slots ascend.
  struct iovec slot(size_t slot) const {
    return {base_ + slot * stride(), stride()};
  }

 private:
  FuseSlotBuffers(uint8_t* base, size_t mapped_bytes, size_t data_bytes)
      : base_(base), mapped_bytes_(mapped_bytes), data_bytes_(data_bytes) {}
  uint8_t* DataStart(size_t slot) const { return base_ + slot * stride() + kPageBytes; }
  size_t stride() const { return kPageBytes + data_bytes_; }

  static constexpr size_t kPageBytes = 4096;

  uint8_t* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  size_t data_bytes_ = 0;  // data pages per slot, a multiple of kPageBytes
};

}  // namespace bexd::exports
