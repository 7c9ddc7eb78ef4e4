// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/vhost_user/virtqueue.h"

#include <fmt/format.h>

#include <atomic>
#include <cstring>

namespace bexd::exports {
namespace {

// Offsets within the split ring parts (virtio 1.x, 2.7).
constexpr size_t kRingIdxOffset = 2;
constexpr size_t kRingEntriesOffset = 4;

size_t AvailBytes(uint32_t size) { return kRingEntriesOffset + 2 * size + 2; }
size_t UsedBytes(uint32_t size) { return kRingEntriesOffset + 8 * size + 2; }

uint16_t LoadRelaxed16(const unsigned char* p) {
  return __atomic_load_n(reinterpret_cast<const uint16_t*>(p), __ATOMIC_RELAXED);
}
void StoreRelaxed16(unsigned char* p, uint16_t value) {
  __atomic_store_n(reinterpret_cast<uint16_t*>(p), value, __ATOMIC_RELAXED);
}
void StoreRelaxed32(unsigned char* p, uint32_t value) {
  __atomic_store_n(reinterpret_cast<uint32_t*>(p), value, __ATOMIC_RELAXED);
}

bool Aligned(const void* p, uintptr_t alignment) {
  return (reinterpret_cast<uintptr_t>(p) & (alignment - 1)) == 0;
}

// virtio's vring_need_event(): whether the driver's event index lies in (old, new].
bool NeedEvent(uint16_t event, uint16_t new_idx, uint16_t old_idx) {
  return static_cast<uint16_t>(new_idx - event - 1) < static_cast<uint16_t>(new_idx - old_idx);
}

}  // namespace

absl::Status Virtqueue::Start(const VirtqueueLayout& layout, const GuestMemory* memory) {
  desc_ = nullptr;
  broken_ = nullptr;
  if (!IsValidSize(layout.size)) {
    return absl::InvalidArgumentError(
        fmt::format("queue size {} is not a power of two in [1, {}]", layout.size, kMaxSize));
  }
  auto* desc = static_cast<const unsigned char*>(
      memory->FrontendToHost(layout.desc_addr, sizeof(Desc) * layout.size));
  auto* avail = static_cast<unsigned char*>(
      memory->FrontendToHost(layout.avail_addr, AvailBytes(layout.size)));
  auto* used =
      static_cast<unsigned char*>(memory->FrontendToHost(layout.used_addr, UsedBytes(layout.size)));
  if (desc == nullptr || avail == nullptr || used == nullptr) {
    return absl::InvalidArgumentError("ring address outside guest memory");
  }
  if (!Aligned(desc, 16) || !Aligned(avail, 2) || !Aligned(used, 4)) {
    return absl::InvalidArgumentError("ring address misaligned");
  }
  memory_ = memory;
  size_ = layout.size;
  event_idx_ = layout.event_idx;
  indirect_ = layout.indirect;
  avail_ = avail;
  used_ = used;
  next_avail_ = layout.next_avail;
  used_idx_ = LoadRelaxed16(used_ + kRingIdxOffset);
  published_used_ = used_idx_;
  desc_ = desc;
  return absl::OkStatus();
}

Virtqueue::PopResult Virtqueue::Break(const char* reason) {
  broken_ = reason;
  return PopResult::kBroken;
}

uint16_t Virtqueue::LoadAvailIdx() const {
  // Acquire: the ring entries and descriptors the driver wrote before publishing the index are
  // visible once we see it.
  return __atomic_load_n(reinterpret_cast<const uint16_t*>(avail_ + kRingIdxOffset),
                         __ATOMIC_ACQUIRE);
}

bool Virtqueue::AddBuffer(const Desc& desc, struct iovec* iov, int capacity, Chain* chain,
                          bool* seen_write) {
  bool writable = (desc.flags & vring::kDescWrite) != 0;
  if (!writable && *seen_write) {
    Break("device-readable buffer after a device-writable one");
    return false;
  }
  *seen_write = *seen_write || writable;
  int used = chain->readable + chain->writable;
  int n = memory_->TranslateGuest(desc.addr, desc.len, iov + used, capacity - used);
  if (n < 0) {
    Break("buffer outside guest memory, or more buffers than a request slot holds");
    return false;
  }
  (writable ? chain->writable : chain->readable) += n;
  return true;
}

Virtqueue::PopResult Virtqueue::Pop(struct iovec* iov, int capacity, Chain* chain) {
  if (broken_ != nullptr) return PopResult::kBroken;
  uint16_t avail_idx = LoadAvailIdx();
  if (avail_idx == next_avail_) return PopResult::kEmpty;
  // Both limits: a ring restarted at a base the guest never reached (SET_VRING_BASE past the
  // available index) would otherwise serve stale entries the guest never published.
  if (static_cast<uint16_t>(avail_idx - next_avail_) > size_) {
    return Break("available index is more than the queue size ahead of the next entry to take");
  }
  if (static_cast<uint16_t>(avail_idx - used_idx_) > size_) {
    return Break("available index is more than the queue size ahead of the used index");
  }
  uint16_t head = LoadRelaxed16(avail_ + kRingEntriesOffset + 2 * (next_avail_ & (size_ - 1)));
  if (head >= size_) return Break("available ring names a descriptor past the queue size");

  *chain = Chain{head, iov, 0, 0};
  bool seen_write = false;
  const unsigned char* table = desc_;
  uint32_t table_size = size_;
  uint32_t index = head;
  uint32_t steps = 0;  // in the current table; more than its size means a loop
  bool in_indirect = false;
  for (;;) {
    if (++steps > table_size) return Break("descriptor chain loops");
    Desc desc;
    memcpy(&desc, table + sizeof(Desc) * index, sizeof(Desc));  // read once: the guest may race
    if (desc.flags & vring::kDescIndirect) {
      if (!indirect_) return Break("indirect descriptor without VIRTIO_RING_F_INDIRECT_DESC");
      if (in_indirect) return Break("nested indirect descriptor table");
      if (index != head || (desc.flags & vring::kDescNext)) {
        return Break("indirect descriptor not alone in its chain");
      }
      if (desc.len == 0 || desc.len % sizeof(Desc) != 0 || desc.len / sizeof(Desc) > size_) {
        return Break("indirect table size is not a multiple of 16 in [16, 16 * queue size]");
      }
      const void* host = memory_->GuestToHost(desc.addr, desc.len);
      if (host == nullptr) return Break("indirect table outside guest memory");
      table = static_cast<const unsigned char*>(host);
      table_size = desc.len / sizeof(Desc);
      index = 0;
      steps = 0;
      in_indirect = true;
      continue;
    }
    if (!AddBuffer(desc, iov, capacity, chain, &seen_write)) return PopResult::kBroken;
    if (!(desc.flags & vring::kDescNext)) break;
    if (desc.next >= table_size) return Break("descriptor names a next index past its table");
    index = desc.next;
  }
  ++next_avail_;
  return PopResult::kChain;
}

void Virtqueue::PushUsed(uint16_t head, uint32_t written) {
  unsigned char* entry = used_ + kRingEntriesOffset + 8 * (used_idx_ & (size_ - 1));
  StoreRelaxed32(entry, head);
  StoreRelaxed32(entry + 4, written);
  ++used_idx_;
}

bool Virtqueue::FlushUsed() {
  if (used_idx_ == published_used_) return false;
  uint16_t old_idx = published_used_;
  // Release: the entries above are visible before the index that publishes them.
  __atomic_store_n(reinterpret_cast<uint16_t*>(used_ + kRingIdxOffset), used_idx_,
                   __ATOMIC_RELEASE);
  published_used_ = used_idx_;
  // The index store must be visible before we read the driver's wish to be notified, or a driver
  // that just re-armed notifications could be missed.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (event_idx_) {
    uint16_t used_event = LoadRelaxed16(avail_ + kRingEntriesOffset + 2 * size_);
    return NeedEvent(used_event, used_idx_, old_idx);
  }
  return (LoadRelaxed16(avail_) & vring::kAvailNoInterrupt) == 0;
}

bool Virtqueue::EnableKick() {
  if (event_idx_) {
    StoreRelaxed16(used_ + kRingEntriesOffset + 8 * size_, next_avail_);
  } else {
    StoreRelaxed16(used_, 0);
  }
  // The store above must be visible before we look at the index again, or a chain the driver
  // made available just before reading it would wait for a kick that never comes.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return LoadAvailIdx() == next_avail_;
}

void Virtqueue::DisableKick() {
  if (!event_idx_) StoreRelaxed16(used_, vring::kUsedNoNotify);
}

}  // namespace bexd::exports
