// SPDX-License-Identifier: GPL-2.0-or-later
// Grace periods for host clusters that the metadata thread frees while queue threads may still be
// reading or writing them through a mapping they looked up without a lock (an SRCU-style scheme).
//
// Each reader (a queue thread) counts its requests in flight in one of two slots, chosen by the
// parity of a global epoch when the request starts; only that thread writes its counters. To make
// sure no request that might have seen an old mapping is still running, the metadata thread flips
// the epoch twice and waits each time until every reader's slot of the old parity is empty. A
// reader increments its slot and then issues a full fence before it looks anything up, so a
// request the metadata thread did not count is guaranteed to see the new mapping.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace bexd::block::qcow2 {

class GraceDomain {
 public:
  struct alignas(64) Reader {
    std::atomic<uint64_t> active[2] = {0, 0};
  };

  // Control path (queue creation and destruction).
  Reader* Register();
  void Unregister(Reader* reader);

  // The reader's own thread: returns the slot to pass to Exit.
  static uint32_t Enter(const GraceDomain& domain, Reader* reader) {
    uint32_t slot = static_cast<uint32_t>(domain.epoch_.load(std::memory_order_acquire) & 1);
    std::atomic<uint64_t>& counter = reader->active[slot];
    counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return slot;
  }
  static void Exit(Reader* reader, uint32_t slot) {
    std::atomic<uint64_t>& counter = reader->active[slot];
    counter.store(counter.load(std::memory_order_relaxed) - 1, std::memory_order_release);
  }

  // The metadata thread. A grace period is complete once WaitStep() returns true twice in a row
  // after a call to Begin(); the caller polls it (it never blocks).
  class Period {
   public:
    explicit Period(GraceDomain* domain) : domain_(domain) { Flip(); }
    // True once every reader that might have seen the state before Begin has finished.
    bool Done();

   private:
    void Flip();
    GraceDomain* domain_;
    uint32_t old_slot_ = 0;
    int flips_ = 0;
  };

 private:
  std::atomic<uint64_t> epoch_{0};
  std::mutex mutex_;
  std::vector<std::unique_ptr<Reader>> readers_;
};

}  // namespace bexd::block::qcow2
