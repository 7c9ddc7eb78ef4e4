// SPDX-License-Identifier: GPL-2.0-or-later
// A lock-free hand-off of IoRequests from any number of threads to one consumer (librbd's
// completion threads to a queue thread; queue threads to an nbd connection thread and back):
// producers push one request at a time with a compare-and-swap, linked through the request's own
// RequestLink, so nothing locks or allocates; the consumer takes all of them at once with one
// exchange. Taking everything at once is what keeps it free of the ABA problem.
#pragma once

#include <atomic>

#include "block/request_list.h"

namespace bexd::block {

class RequestStack {
 public:
  // Returns true if the stack was empty: the pusher then wakes the consumer.
  bool Push(IoRequest* request) {
    RequestLink* link = DriverState<RequestLink>(request);
    IoRequest* head = head_.load(std::memory_order_relaxed);
    do {
      link->next = head;
    } while (!head_.compare_exchange_weak(head, request, std::memory_order_release,
                                          std::memory_order_relaxed));
    return head == nullptr;
  }

  // Moves every pushed request to `out`, oldest first.
  void TakeAll(RequestList* out) {
    IoRequest* newest = head_.exchange(nullptr, std::memory_order_acquire);
    IoRequest* oldest = nullptr;
    while (newest != nullptr) {  // reverse the stack into push order
      RequestLink* link = DriverState<RequestLink>(newest);
      IoRequest* next = link->next;
      link->next = oldest;
      oldest = newest;
      newest = next;
    }
    while (oldest != nullptr) {
      IoRequest* next = RequestList::Next(oldest);
      out->PushBack(oldest);
      oldest = next;
    }
  }

 private:
  std::atomic<IoRequest*> head_{nullptr};
};

}  // namespace bexd::block
