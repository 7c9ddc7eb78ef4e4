// SPDX-License-Identifier: GPL-2.0-or-later
// What a handler (or the completion of its block I/O) does with its request. Every handler returns
// exactly one Answer and never writes a reply header itself: Queue::Respond (fuse/queue.cc) is
// the one place that writes fuse_out_headers, counts the request and hands it back.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace bexd::fuse {

class [[nodiscard]] Answer {
 public:
  enum class Kind : uint8_t {
    kPayload,   // a reply of payload_bytes, already written into the reply body
    kError,     // an error reply carrying error()
    kPending,   // block I/O was submitted; its completion answers
    kNoReply,   // the opcode takes no reply (FORGET, INTERRUPT, ...)
    kRejected,  // no reply can be built: the transport gets -error()
  };

  // `error` is a positive errno.
  static constexpr Answer Error(int error) { return Answer(Kind::kError, error, 0); }
  // A failed block I/O: `result` is its -errno. Anything outside the errno range (a driver bug)
  // becomes EIO, never a negated INT64_MIN.
  static constexpr Answer IoError(int64_t result) {
    return Error(result < 0 && result >= -4095 ? static_cast<int>(-result) : EIO);
  }
  static constexpr Answer Payload(size_t bytes) { return Answer(Kind::kPayload, 0, bytes); }
  static constexpr Answer Empty() { return Payload(0); }
  static constexpr Answer Pending() { return Answer(Kind::kPending, 0, 0); }
  static constexpr Answer NoReply() { return Answer(Kind::kNoReply, 0, 0); }
  static constexpr Answer Rejected(int error) { return Answer(Kind::kRejected, error, 0); }

  Kind kind() const { return kind_; }
  int error() const { return error_; }
  size_t payload_bytes() const { return payload_bytes_; }

 private:
  constexpr Answer(Kind kind, int error, size_t payload_bytes)
      : kind_(kind), error_(error), payload_bytes_(payload_bytes) {}

  Kind kind_;
  int error_;
  size_t payload_bytes_;
};

}  // namespace bexd::fuse
