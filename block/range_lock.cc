// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/range_lock.h"

namespace bexd::block {

bool RangeLock::OverlapsHeld(const Range& range) const {
  for (const Range* held = held_; held != nullptr; held = held->next) {
    if (held->start < range.end && range.start < held->end) return true;
  }
  return false;
}

void RangeLock::Lock(Range* range) {
  std::unique_lock lock(mutex_);
  released_.wait(lock, [&] { return !OverlapsHeld(*range); });
  range->next = held_;
  held_ = range;
}

void RangeLock::Unlock(Range* range) {
  {
    std::lock_guard lock(mutex_);
    for (Range** link = &held_; *link != nullptr; link = &(*link)->next) {
      if (*link == range) {
        *link = range->next;
        break;
      }
    }
  }
  released_.notify_all();
}

}  // namespace bexd::block
