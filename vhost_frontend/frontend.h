// SPDX-License-Identifier: GPL-2.0-or-later
// A vhost-user frontend for tests and benchmarks: plays QEMU's part against a vhost-user-fs
// backend over the real unix socket protocol. Guest memory is a memfd or a given file or block
// device (optionally presented as two guest-contiguous regions, to exercise buffers that cross a
// region boundary), each virtqueue
// a split ring in it with kick and call eventfds. Requests go out as descriptor chains built the
// way Linux's virtio-fs driver builds them (direct or through an indirect table); raw access to
// the rings lets tests hand the backend malformed chains.
//
// Reuse (e.g. a requests/second benchmark): Frontend::Connect(), then per request queue keep up to
// max_in_flight requests going with Submit() + WaitCompletions(); Fuse() is the synchronous form.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <linux/fuse.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "export/vhost_user/vhost_user_channel.h"
#include "util/unique_fd.h"

namespace bexd::test::vhost {

struct FrontendOptions {
  std::string socket_path;
  uint32_t request_queues = 1;  // rings 1..request_queues; ring 0 is hiprio
  uint32_t queue_size = 128;
  uint32_t max_in_flight = 16;            // request slots per ring
  size_t slot_buffer_bytes = 256 * 1024;  // guest buffer per slot (request + reply)
  bool event_idx = true;
  bool indirect = false;     // chains through an indirect table instead of the ring's table
  bool two_regions = false;  // present guest memory as two regions, split mid-way
  // Guest memory in this file or block device (from offset 0) instead of a memfd; a file is grown
  // to the size needed, a block device must be large enough.
  std::string memory_path;
  // Each ring's kick fd is one end of a unix stream socket pair (a kick writes 8 bytes to the
  // other) instead of an eventfd: a backend must not treat it as one.
  bool kick_socket = false;
  std::chrono::milliseconds timeout{10000};  // bound on every wait
};

// One finished request.
struct Completion {
  int slot = 0;
  uint32_t written = 0;  // bytes the backend wrote (used element len)
};

// A FUSE reply as the guest sees it.
struct FuseReply {
  uint32_t written = 0;  // used element len
  struct fuse_out_header header = {};
  std::vector<unsigned char> payload;  // bytes after the header
};

class Frontend {
 public:
  // Connects (retrying until the socket appears or the timeout passes), negotiates features,
  // sends the memory table and starts every ring, as QEMU does when the guest driver starts.
  static absl::StatusOr<std::unique_ptr<Frontend>> Connect(const FrontendOptions& options);
  ~Frontend();
  Frontend(const Frontend&) = delete;
  Frontend& operator=(const Frontend&) = delete;

  // --- FUSE requests --------------------------------------------------------------------------
  // Sends one request (header + args, then `data`) on `ring` and waits for its reply; `reply_room`
  // is the writable space offered (header included).
  absl::StatusOr<FuseReply> Fuse(uint32_t ring, uint32_t opcode, uint64_t node_id, const void* args,
                                 size_t args_size, const void* data = nullptr, size_t data_size = 0,
                                 size_t reply_room = 4096);
  // FUSE_INIT with the flags Linux's virtio-fs driver sends; returns the reply.
  absl::StatusOr<struct fuse_init_out> Init();
  // Asynchronous form: queues the request on a free slot and kicks; returns the slot.
  absl::StatusOr<int> Submit(uint32_t ring, uint32_t opcode, uint64_t node_id, const void* args,
                             size_t args_size, const void* data, size_t data_size,
                             size_t reply_room);
  // Waits (up to the timeout) until at least one request on `ring` completes; returns all that
  // have. The slots become free again.
  absl::StatusOr<std::vector<Completion>> WaitCompletions(uint32_t ring);
  // The reply a completed slot holds (valid until the slot is reused).
  FuseReply ReplyOf(uint32_t ring, const Completion& completion) const;
  // The same reply in place in guest memory (`completion.written` bytes, header first), for
  // callers that must not copy it, such as a benchmark.
  const unsigned char* ReplyBytes(uint32_t ring, const Completion& completion) const;

  // --- raw ring access, for malformed chains --------------------------------------------------
  struct RawDesc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
  };
  // Writes descriptor `index` of the ring's table (no bounds check on the guest side).
  void WriteDesc(uint32_t ring, uint32_t index, const RawDesc& desc);
  // Writes `head` into the available ring `ahead` entries past the available index, without
  // publishing it (a stale entry).
  void WriteAvailEntry(uint32_t ring, uint16_t ahead, uint16_t head);
  // Puts `head` on the available ring and publishes avail idx + `extra_idx` (to fake a jump).
  void PublishHead(uint32_t ring, uint16_t head, uint16_t extra_idx = 0);
  // Guest physical address of a scratch area of `bytes` usable for raw chains.
  uint64_t ScratchGpa() const { return scratch_gpa_; }
  unsigned char* GuestPtr(uint64_t gpa) const;
  uint64_t memory_bytes() const { return memory_bytes_; }
  // The fd guest memory is mapped from, and the frontend address of guest address 0 (what a
  // memory table of one's own needs).
  int memory_fd() const { return memory_fd_.get(); }
  uint64_t frontend_addr() const { return reinterpret_cast<uint64_t>(memory_); }
  uint16_t used_idx(uint32_t ring) const;
  // Waits for the used index to reach `idx`; false on timeout.
  bool WaitUsedIdx(uint32_t ring, uint16_t idx);
  void Kick(uint32_t ring);
  // The frontend's ends of the ring's call and error eventfds (what a hostile frontend could
  // tamper with: they share the open file description the backend received).
  int call_fd(uint32_t ring) const { return rings_[ring].call.get(); }
  int err_fd(uint32_t ring) const { return rings_[ring].err.get(); }
  // Waits (up to the timeout) for the backend to signal the ring's error eventfd (a broken ring).
  bool WaitRingError(uint32_t ring);

  // --- protocol -------------------------------------------------------------------------------
  // Sends a message (with REPLY_ACK requested if `ack`) and, if acked, returns the backend's
  // verdict (0 = success).
  absl::StatusOr<uint64_t> Send(uint32_t request, const void* payload, size_t size,
                                const std::vector<int>& fds = {}, bool ack = true);
  // GET_VRING_BASE: stops the ring and returns its next available index.
  absl::StatusOr<uint32_t> GetVringBase(uint32_t ring);
  // Starts a ring where it stands (SET_VRING_NUM/BASE/ADDR/KICK/CALL/ERR/ENABLE), as QEMU does
  // when the driver starts or the VM resumes. A hostile frontend gives a base `base_ahead`
  // entries past the available index.
  absl::Status StartRing(uint32_t ring, uint16_t base_ahead = 0);
  // Closes the connection without any goodbye, as a crashing QEMU would.
  void Drop();
  // Sends the memory table (again: the same memfd, as QEMU does when guest memory changes).
  absl::Status SendMemTable();
  int socket_fd() const { return socket_.get(); }

 private:
  struct Ring {
    uint32_t size = 0;
    uint64_t desc_gpa = 0, avail_gpa = 0, used_gpa = 0;
    uint64_t slots_gpa = 0;          // max_in_flight buffers of slot_buffer_bytes
    util::UniqueFd kick, call, err;  // kick: what Kick() writes to
    util::UniqueFd kick_peer;        // with kick_socket: the end the backend reads
    uint16_t avail_idx = 0;
    uint16_t last_used = 0;
    std::vector<bool> busy;
    std::vector<size_t> reply_offset;  // per slot: where the writable part starts in its buffer
  };
  explicit Frontend(FrontendOptions options) : options_(std::move(options)) {}
  absl::Status SetUp();
  absl::StatusOr<exports::vhost::Message> Receive();
  // Sends with REPLY_ACK; fails unless the backend accepted the message.
  absl::Status Apply(uint32_t request, const void* payload, size_t size,
                     const std::vector<int>& fds = {});
  // Sends a GET_* message and returns its u64 reply.
  absl::StatusOr<uint64_t> Query(uint32_t request);
  uint64_t SlotGpa(const Ring& ring, int slot) const;
  uint16_t DescsPerSlot(const Ring& ring) const;

  FrontendOptions options_;
  util::UniqueFd socket_;
  util::UniqueFd memory_fd_;
  unsigned char* memory_ = nullptr;
  uint64_t memory_bytes_ = 0;
  uint64_t scratch_gpa_ = 0;
  std::vector<Ring> rings_;
  std::atomic<uint64_t> next_unique_{1};  // Submit() may run on several threads, one per ring
};

}  // namespace bexd::test::vhost
