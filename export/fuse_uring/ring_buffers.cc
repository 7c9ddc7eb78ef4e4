// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_uring/ring_buffers.h"

#include <errno.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <cstring>
#include <utility>

namespace bexd::exports {
namespace {

constexpr size_t kPageBytes = 4096;

size_t RoundUpToPage(size_t bytes) { return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes; }

}  // namespace

absl::StatusOr<RingBuffers> RingBuffers::Create(uint32_t entries, size_t payload_bytes) {
  // The headers first (their own pages), then the payload buffers back to back.
  const size_t header_bytes =
      RoundUpToPage(size_t{entries} * sizeof(fuse::abi::fuse_uring_req_header));
  payload_bytes = RoundUpToPage(payload_bytes);
  const size_t mapped_bytes = header_bytes + size_t{entries} * payload_bytes;
  void* mapping = ::mmap(nullptr, mapped_bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) {
    return absl::ResourceExhaustedError(fmt::format(
        "cannot map {} bytes of io_uring ring buffers: {}", mapped_bytes, std::strerror(errno)));
  }
  auto* base = static_cast<uint8_t*>(mapping);
  return RingBuffers(mapping, mapped_bytes,
                     reinterpret_cast<fuse::abi::fuse_uring_req_header*>(base), base + header_bytes,
                     payload_bytes);
}

RingBuffers::RingBuffers(RingBuffers&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapped_bytes_(other.mapped_bytes_),
      headers_(other.headers_),
      payloads_(other.payloads_),
      payload_bytes_(other.payload_bytes_) {}

RingBuffers::~RingBuffers() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapped_bytes_);
}

}  // namespace bexd::exports
