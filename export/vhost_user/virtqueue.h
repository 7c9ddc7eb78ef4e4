// SPDX-License-Identifier: GPL-2.0-or-later
// The device side of one split virtqueue in untrusted guest memory: takes descriptor chains off
// the available ring as host iovecs and returns them on the used ring. Every index, length,
// address and flag read from the ring is checked before use, and read once (into a local copy) so
// the guest cannot change it between the check and the use. A violation breaks the queue: it
// takes no more chains until it is started again. No locks, no allocation, no system calls; the
// owner (one queue thread) does the waiting and the eventfd signalling.
#pragma once

#include <absl/status/status.h>

#include <sys/uio.h>

#include <bit>
#include <cstdint>
#include <string_view>

#include "export/vhost_user/guest_memory.h"

namespace bexd::exports {

// Split ring flags (virtio 1.x, 2.7). <linux/virtio_ring.h> does not compile as C++.
namespace vring {
inline constexpr uint16_t kDescNext = 1;
inline constexpr uint16_t kDescWrite = 2;
inline constexpr uint16_t kDescIndirect = 4;
inline constexpr uint16_t kUsedNoNotify = 1;
inline constexpr uint16_t kAvailNoInterrupt = 1;
}  // namespace vring

// Where a ring lives, as SET_VRING_NUM/ADDR/BASE gave it (addresses in the frontend's space).
struct VirtqueueLayout {
  uint32_t size = 0;  // a power of two, at most Virtqueue::kMaxSize
  uint64_t desc_addr = 0;
  uint64_t avail_addr = 0;
  uint64_t used_addr = 0;
  uint16_t next_avail = 0;  // the first available ring entry not yet taken
  bool event_idx = false;   // VIRTIO_RING_F_EVENT_IDX negotiated
  bool indirect = false;    // VIRTIO_RING_F_INDIRECT_DESC negotiated
};

// One descriptor chain taken off the ring: its head and its buffers, device-readable first.
struct Chain {
  uint16_t head = 0;
  struct iovec* iov = nullptr;  // the caller's array
  int readable = 0;             // iov[0, readable) are device-readable
  int writable = 0;             // iov[readable, readable+writable) are device-writable
};

class Virtqueue {
 public:
  // QEMU's limit (VIRTQUEUE_MAX_SIZE); it also bounds per-queue memory here.
  static constexpr uint32_t kMaxSize = 1024;
  // A ring size the virtio spec allows (split rings): a power of two, at most kMaxSize here.
  static bool IsValidSize(uint32_t size) { return std::has_single_bit(size) && size <= kMaxSize; }

  enum class PopResult { kEmpty, kChain, kBroken };

  // Resolves the ring addresses in `memory`, which must outlive the queue's use. On failure the
  // queue stays stopped and the InvalidArgument status says why.
  absl::Status Start(const VirtqueueLayout& layout, const GuestMemory* memory);
  bool started() const { return desc_ != nullptr; }
  bool broken() const { return broken_ != nullptr; }
  const char* broken_reason() const { return broken_; }
  uint32_t size() const { return size_; }
  uint16_t next_avail() const { return next_avail_; }

  // Takes the next available chain, writing at most `capacity` iovecs into `iov`. kBroken if the
  // ring or the chain breaks a rule (see broken_reason()).
  PopResult Pop(struct iovec* iov, int capacity, Chain* chain);

  // Breaks the queue from outside (a chain whose content the request core rejected outright).
  void MarkBroken(const char* reason) { broken_ = reason; }

  // Records that the chain at `head` is done, `written` bytes of its writable part filled in.
  // Visible to the guest only after FlushUsed().
  void PushUsed(uint16_t head, uint32_t written);
  // Publishes the used entries pushed since the last flush. True if the guest asked to be
  // notified about them (the caller then signals the call eventfd).
  bool FlushUsed();

  // True if the guest has made a chain available that Pop() has not taken (and the ring works).
  bool HasAvail() const { return broken_ == nullptr && LoadAvailIdx() != next_avail_; }

  // Before sleeping: asks the guest to kick for new chains. Returns false if chains arrived in
  // the meantime (the caller then processes them instead of sleeping).
  bool EnableKick();
  // While processing: tells the guest kicks are not needed (no-op with EVENT_IDX).
  void DisableKick();

 private:
  struct Desc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
  };
  static_assert(sizeof(Desc) == 16);

  PopResult Break(const char* reason);
  uint16_t LoadAvailIdx() const;
  // Appends the buffer of `desc` to the chain; false (queue broken) if it is invalid.
  bool AddBuffer(const Desc& desc, struct iovec* iov, int capacity, Chain* chain, bool* seen_write);

  const GuestMemory* memory_ = nullptr;
  uint32_t size_ = 0;
  bool event_idx_ = false;
  bool indirect_ = false;
  const unsigned char* desc_ = nullptr;  // size_ descriptors
  unsigned char* avail_ = nullptr;       // flags, idx, ring[size_], used_event
  unsigned char* used_ = nullptr;        // flags, idx, ring[size_] of {id, len}, avail_event
  uint16_t next_avail_ = 0;
  uint16_t used_idx_ = 0;         // our copy of used->idx, including unpublished entries
  uint16_t published_used_ = 0;   // used->idx as last written
  const char* broken_ = nullptr;  // a static string
};

}  // namespace bexd::exports
