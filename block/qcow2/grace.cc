// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/grace.h"

#include <algorithm>

namespace bexd::block::qcow2 {

GraceDomain::Reader* GraceDomain::Register() {
  std::lock_guard lock(mutex_);
  readers_.push_back(std::make_unique<Reader>());
  return readers_.back().get();
}

void GraceDomain::Unregister(Reader* reader) {
  std::lock_guard lock(mutex_);
  std::erase_if(readers_, [reader](const std::unique_ptr<Reader>& r) { return r.get() == reader; });
}

void GraceDomain::Period::Flip() {
  // Orders the caller's earlier stores (the new mapping) before the flip and the counter reads.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  old_slot_ = static_cast<uint32_t>(domain_->epoch_.fetch_add(1, std::memory_order_seq_cst) & 1);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ++flips_;
}

bool GraceDomain::Period::Done() {
  for (;;) {
    {
      std::lock_guard lock(domain_->mutex_);
      for (const auto& reader : domain_->readers_) {
        if (reader->active[old_slot_].load(std::memory_order_acquire) != 0) return false;
      }
    }
    // Two flips: a reader that read the epoch before the first flip but counted itself only
    // after our check uses the old slot again in the next period.
    if (flips_ >= 2) return true;
    Flip();
  }
}

}  // namespace bexd::block::qcow2
