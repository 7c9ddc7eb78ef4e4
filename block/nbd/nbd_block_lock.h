// SPDX-License-Identifier: GPL-2.0-or-later
// The blocks of one nbd node under read-modify-write. A write that is not aligned to the server's
// minimum block size reads its first and last blocks, merges its bytes in and writes them back;
// two such writes into the same block, on any of the node's connections, must run one after the
// other, or the second would write back bytes read before the first landed. Only these writes
// take the lock, and no queue thread ever blocks on it: a request that has to wait is parked
// here and handed back to its connection's thread when the range is free. Waiters are granted in
// the order they came, so a stream of writes to one block cannot starve an earlier one.
#pragma once

#include <cstdint>
#include <mutex>

#include "block/io_request.h"

namespace bexd::block {

class NbdConnection;

class NbdBlockLock {
 public:
  // Takes [start, end) for `request` (its NbdRequestState holds the range and the link), or
  // parks it behind the held or waiting ranges it overlaps: false then, and the request comes
  // back through its connection's Resume() once it holds the range.
  bool Lock(IoRequest* request, uint64_t start, uint64_t end);
  // Releases the range `request` holds and resumes the waiters that no longer overlap anything.
  void Unlock(IoRequest* request);
  // The connection is closing with requests still in it: forgets every range it holds or waits
  // for (their requests are dropped), resuming other connections' waiters where that frees them.
  void Withdraw(const NbdConnection* owner);

 private:
  bool OverlapsHeldOrEarlierWaiter(const IoRequest* request, const IoRequest* stop) const;
  void Remove(IoRequest** list, IoRequest* request);
  void GrantWaiters();

  std::mutex mutex_;
  IoRequest* held_ = nullptr;     // singly linked through NbdRequestState::lock_next
  IoRequest* waiting_ = nullptr;  // oldest first
};

}  // namespace bexd::block
