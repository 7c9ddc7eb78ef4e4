// SPDX-License-Identifier: GPL-2.0-or-later
// The limit responder's protocol logic: answers one raw FUSE request without touching any data, so
// that a benchmark against it measures only the kernel round trip (the ceiling for any FUSE
// export). The file it serves is a fixed-size regular file that reads as zeroes and discards
// writes.
#pragma once

#include <linux/fuse.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace bexd::perf {

struct ResponderConfig {
  uint64_t file_size = 0;
  // Requests the kernel keeps in flight for asynchronous (libaio) I/O; its default of 12 throttles
  // QD16 and numjobs=4 workloads, which is not what a ceiling should measure.
  uint16_t max_background = 256;
  uint32_t max_write = 1024 * 1024;
};

// Storage for one reply: the out header, the largest fixed-size out argument, and the iovecs that
// point at them (plus the shared zero buffer for READ data). One per queue thread, reused.
struct Reply {
  fuse_out_header header;
  union {
    fuse_init_out init;
    fuse_attr_out attr;
    fuse_open_out open;
    fuse_write_out write;
  } arg;
  iovec iov[3];
  int iov_count = 0;  // 0: the request takes no reply (FORGET, INTERRUPT, ...)
};

class Responder {
 public:
  explicit Responder(const ResponderConfig& config);

  // Size of the buffer a queue thread must read requests into (the kernel refuses smaller ones).
  size_t RequestBufferSize() const;

  // Builds in `reply` the answer to the request in `request` (exactly the bytes one read(2) on
  // /dev/fuse returned). Never fails: malformed requests get an error reply. Thread-safe: the
  // responder holds no per-request state.
  void Answer(std::span<const std::byte> request, Reply& reply) const;

 private:
  void AnswerInit(const fuse_in_header& in, std::span<const std::byte> arg, Reply& reply) const;
  void AnswerRead(const fuse_in_header& in, std::span<const std::byte> arg, Reply& reply) const;
  void AnswerWrite(const fuse_in_header& in, std::span<const std::byte> arg, Reply& reply) const;
  void AnswerGetattr(const fuse_in_header& in, Reply& reply) const;
  void AnswerOpen(const fuse_in_header& in, Reply& reply) const;

  ResponderConfig config_;
  std::vector<std::byte> zeroes_;  // READ replies point here; never written after construction
};

}  // namespace bexd::perf
