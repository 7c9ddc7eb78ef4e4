// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/nbd/nbd_block_lock.h"

#include "block/nbd/nbd_connection.h"
#include "block/nbd/nbd_request.h"

namespace bexd::block {
namespace {

NbdRequestState* StateOf(const IoRequest* request) {
  return DriverState<NbdRequestState>(const_cast<IoRequest*>(request));
}

bool Overlap(const IoRequest* a, const IoRequest* b) {
  const NbdRequestState* x = StateOf(a);
  const NbdRequestState* y = StateOf(b);
  return x->lock_start < y->lock_end && y->lock_start < x->lock_end;
}

void Append(IoRequest** list, IoRequest* request) {
  while (*list != nullptr) list = &StateOf(*list)->lock_next;
  StateOf(request)->lock_next = nullptr;
  *list = request;
}

}  // namespace

bool NbdBlockLock::Lock(IoRequest* request, uint64_t start, uint64_t end) {
  NbdRequestState* state = StateOf(request);
  state->lock_start = start;
  state->lock_end = end;
  std::lock_guard lock(mutex_);
  if (OverlapsHeldOrEarlierWaiter(request, nullptr)) {
    Append(&waiting_, request);
    return false;
  }
  state->holds_lock = true;
  Append(&held_, request);
  return true;
}

void NbdBlockLock::Unlock(IoRequest* request) {
  std::lock_guard lock(mutex_);
  StateOf(request)->holds_lock = false;
  Remove(&held_, request);
  GrantWaiters();
}

void NbdBlockLock::Withdraw(const NbdConnection* owner) {
  std::lock_guard lock(mutex_);
  for (IoRequest** list : {&held_, &waiting_}) {
    IoRequest** link = list;
    while (*link != nullptr) {
      NbdRequestState* state = StateOf(*link);
      if (state->connection == owner) {
        state->holds_lock = false;
        *link = state->lock_next;
      } else {
        link = &state->lock_next;
      }
    }
  }
  GrantWaiters();
}

// `stop`: only waiters before it count (null: all of them).
bool NbdBlockLock::OverlapsHeldOrEarlierWaiter(const IoRequest* request,
                                               const IoRequest* stop) const {
  for (const IoRequest* held = held_; held != nullptr; held = StateOf(held)->lock_next) {
    if (Overlap(request, held)) return true;
  }
  for (const IoRequest* waiter = waiting_; waiter != stop; waiter = StateOf(waiter)->lock_next) {
    if (Overlap(request, waiter)) return true;
  }
  return false;
}

void NbdBlockLock::Remove(IoRequest** list, IoRequest* request) {
  while (*list != nullptr && *list != request) list = &StateOf(*list)->lock_next;
  if (*list != nullptr) *list = StateOf(request)->lock_next;
}

void NbdBlockLock::GrantWaiters() {
  IoRequest** link = &waiting_;
  while (*link != nullptr) {
    IoRequest* waiter = *link;
    NbdRequestState* state = StateOf(waiter);
    if (OverlapsHeldOrEarlierWaiter(waiter, waiter)) {
      link = &state->lock_next;
      continue;
    }
    *link = state->lock_next;
    state->holds_lock = true;
    Append(&held_, waiter);
    state->connection->Resume(waiter);
  }
}

}  // namespace bexd::block
