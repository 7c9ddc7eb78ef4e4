// SPDX-License-Identifier: GPL-2.0-or-later
// The free request slots of one queue thread: a stack of slot indexes, so the slot used last
// (whose buffers are still in cache) is reused first. Only the queue thread touches it: no lock,
// and no allocation after Reset().
#pragma once

#include <cstdint>
#include <memory>

namespace bexd::exports {

class SlotStack {
 public:
  // Room for `count` slots, all free. Allocates only when `count` changes.
  void Reset(uint32_t count) {
    if (count != capacity_) {
      indexes_ = std::make_unique<uint32_t[]>(count);
      capacity_ = count;
    }
    // Slot 0 on top: the first request takes the first slot.
    for (uint32_t i = 0; i < count; ++i) indexes_[i] = count - 1 - i;
    free_ = count;
  }

  uint32_t capacity() const { return capacity_; }
  bool empty() const { return free_ == 0; }         // every slot busy
  bool full() const { return free_ == capacity_; }  // no slot busy
  // The slot Pop() would return. Only when !empty().
  uint32_t Top() const { return indexes_[free_ - 1]; }
  uint32_t Pop() { return indexes_[--free_]; }
  void Push(uint32_t index) { indexes_[free_++] = index; }

 private:
  std::unique_ptr<uint32_t[]> indexes_;
  uint32_t capacity_ = 0;
  uint32_t free_ = 0;
};

}  // namespace bexd::exports
