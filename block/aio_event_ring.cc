// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/aio_event_ring.h"

#include <atomic>
#include <cstring>

namespace bexd::block {

static_assert(sizeof(AioEventRing::Header) == 32);
static_assert(sizeof(struct io_event) == 32);

AioEventRing::AioEventRing(io_context_t context) : context_(context) {
  auto* header = reinterpret_cast<Header*>(context);
  if (header == nullptr || header->magic != kMagic ||
      header->incompat_features != kIncompatFeatures || header->header_length != sizeof(Header) ||
      header->nr == 0) {
    return;
  }
  ring_ = header;
  nr_ = header->nr;  // read once: the kernel never changes it, and a later value is not trusted
  slots_ = reinterpret_cast<struct io_event*>(header + 1);
}

int AioEventRing::Take(struct io_event* events, int capacity) {
  if (ring_ == nullptr) {
    static const struct timespec kNoWait = {0, 0};
    return io_getevents(context_, 0, capacity, events, const_cast<struct timespec*>(&kNoWait));
  }
  // Acquire pairs with the kernel's write barrier between writing an event and advancing tail.
  // Both indices stay below nr; the modulo (as the kernel's own reader does) only keeps a stray
  // value from indexing past the ring.
  const uint32_t tail = std::atomic_ref(ring_->tail).load(std::memory_order_acquire) % nr_;
  uint32_t head = std::atomic_ref(ring_->head).load(std::memory_order_relaxed) % nr_;
  int count = 0;
  while (count < capacity && head != tail) {
    std::memcpy(&events[count++], &slots_[head], sizeof(struct io_event));
    head = head + 1 == nr_ ? 0 : head + 1;
  }
  // Release: the copies above are done before the kernel may reuse their slots.
  if (count > 0) std::atomic_ref(ring_->head).store(head, std::memory_order_release);
  return count;
}

}  // namespace bexd::block
