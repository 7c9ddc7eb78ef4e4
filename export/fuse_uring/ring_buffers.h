// SPDX-License-Identifier: GPL-2.0-or-later
// The buffers of one io_uring queue's ring entries, registered with the kernel once: per entry a
// header buffer (fuse_uring_req_header: the in/out header, the opcode's argument struct, the
// kernel's bookkeeping) and a payload buffer (WRITE data and READ data, names, reply structs).
//
// Payload buffers start on page boundaries, so WRITE data arrives and READ data is built
// page-aligned and O_DIRECT backends need no bounce buffer. Both live in anonymous mappings whose
// pages are allocated only as requests touch them.
#pragma once

#include <absl/status/statusor.h>

#include <cstddef>
#include <cstdint>

#include "fuse/fuse_abi_ext.h"

namespace bexd::exports {

class RingBuffers {
 public:
  // Room for `entries` entries whose payload buffers hold at least `payload_bytes` each.
  static absl::StatusOr<RingBuffers> Create(uint32_t entries, size_t payload_bytes);
  RingBuffers(RingBuffers&& other) noexcept;
  RingBuffers& operator=(RingBuffers&&) = delete;
  RingBuffers(const RingBuffers&) = delete;
  RingBuffers& operator=(const RingBuffers&) = delete;
  ~RingBuffers();

  fuse::abi::fuse_uring_req_header& header(uint32_t entry) const { return headers_[entry]; }
  uint8_t* payload(uint32_t entry) const { return payloads_ + entry * payload_bytes_; }
  size_t payload_bytes() const { return payload_bytes_; }

 private:
  RingBuffers(void* mapping, size_t mapped_bytes, fuse::abi::fuse_uring_req_header* headers,
              uint8_t* payloads, size_t payload_bytes)
      : mapping_(mapping),
        mapped_bytes_(mapped_bytes),
        headers_(headers),
        payloads_(payloads),
        payload_bytes_(payload_bytes) {}

  void* mapping_ = nullptr;
  size_t mapped_bytes_ = 0;
  fuse::abi::fuse_uring_req_header* headers_ = nullptr;
  uint8_t* payloads_ = nullptr;
  size_t payload_bytes_ = 0;  // a multiple of the page size
};

}  // namespace bexd::exports
