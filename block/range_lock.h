// SPDX-License-Identifier: GPL-2.0-or-later
// Mutual exclusion over byte ranges of one node, for the O_DIRECT read-modify-write slow path:
// two writes whose aligned spans overlap run one after the other, so neither rewrites a block
// with stale bytes read before the other's write landed. Only worker threads block here; the
// aligned fast path never touches it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace bexd::block {

class RangeLock {
 public:
  // Storage for one held range; lives on the locker's stack while held.
  struct Range {
    uint64_t start = 0;
    uint64_t end = 0;  // exclusive
    Range* next = nullptr;
  };

  // Blocks until no held range overlaps [range->start, range->end), then holds it.
  void Lock(Range* range);
  void Unlock(Range* range);

 private:
  bool OverlapsHeld(const Range& range) const;

  std::mutex mutex_;
  std::condition_variable released_;
  Range* held_ = nullptr;
};

class RangeGuard {
 public:
  RangeGuard(RangeLock& lock, uint64_t start, uint64_t end) : lock_(lock) {
    range_.start = start;
    range_.end = end;
    lock_.Lock(&range_);
  }
  ~RangeGuard() { lock_.Unlock(&range_); }
  RangeGuard(const RangeGuard&) = delete;
  RangeGuard& operator=(const RangeGuard&) = delete;

 private:
  RangeLock& lock_;
  RangeLock::Range range_;
};

}  // namespace bexd::block
