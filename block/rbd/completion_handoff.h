// Requests that finished on threads the queue does not own (librbd's), handed back to the queue
// thread that submitted them. A lock-free multi-producer, single-consumer stack linked through
// the requests' own RequestLink, so the hand-off neither locks nor allocates: a producer pushes
// with one compare-and-swap, the owner takes the whole stack with one exchange. Taking all at
// once makes the stack immune to ABA (nothing is ever popped singly).
#pragma once

#include <atomic>

#include "block/request_list.h"

namespace bexd::block {

class CompletionHandoff {
 public:
  // Any thread. The request's RequestLink must be free (it is not on any list). Returns true if
  // the stack was empty, i.e. the owner may be asleep and needs a wake-up.
  bool Push(IoRequest* request) {
    RequestLink* link = DriverState<RequestLink>(request);
    IoRequest* head = head_.load(std::memory_order_relaxed);
    do {
      link->next = head;
    } while (!head_.compare_exchange_weak(head, request, std::memory_order_release,
                                          std::memory_order_relaxed));
    return head == nullptr;
  }

  // Owner thread: appends every request pushed so far to `out`, oldest first.
  void TakeAll(RequestList* out) {
    IoRequest* newest = head_.exchange(nullptr, std::memory_order_acquire);
    IoRequest* oldest = nullptr;
    while (newest != nullptr) {  // reverse the stack into push order
      RequestLink* link = DriverState<RequestLink>(newest);
      IoRequest* older = link->next;
      link->next = oldest;
      oldest = newest;
      newest = older;
    }
    while (oldest != nullptr) {
      IoRequest* next = DriverState<RequestLink>(oldest)->next;
      out->PushBack(oldest);
      oldest = next;
    }
  }

 private:
  std::atomic<IoRequest*> head_{nullptr};
};

}  // namespace bexd::block
