// SPDX-License-Identifier: GPL-2.0-or-later
// An intrusive FIFO of IoRequests. The link lives in the first bytes of IoRequest::driver_state,
// so queueing a request never allocates; every driver's state struct derives from RequestLink.
#pragma once

#include <new>
#include <type_traits>

#include "block/io_request.h"

namespace bexd::block {

struct RequestLink {
  IoRequest* next = nullptr;
};

// Constructs a driver's per-request state in request->driver_state (trivially destructible
// structs only; the request's storage is reused without running destructors).
template <typename State>
State* EmplaceDriverState(IoRequest* request) {
  static_assert(sizeof(State) <= sizeof(IoRequest::driver_state), "driver state too large");
  static_assert(alignof(State) <= 16, "driver state over-aligned");
  static_assert(std::is_trivially_destructible_v<State>);
  return new (request->driver_state) State();
}

template <typename State>
State* DriverState(IoRequest* request) {
  return std::launder(reinterpret_cast<State*>(request->driver_state));
}

class RequestList {
 public:
  bool empty() const { return head_ == nullptr; }
  IoRequest* front() const { return head_; }
  IoRequest* back() const { return tail_; }
  // The request after `request` in whatever list holds it, or nullptr.
  static IoRequest* Next(IoRequest* request) { return Link(request)->next; }

  void PushBack(IoRequest* request) {
    Link(request)->next = nullptr;
    if (tail_ == nullptr) {
      head_ = request;
    } else {
      Link(tail_)->next = request;
    }
    tail_ = request;
  }

  IoRequest* PopFront() {
    IoRequest* request = head_;
    if (request == nullptr) return nullptr;
    head_ = Link(request)->next;
    if (head_ == nullptr) tail_ = nullptr;
    return request;
  }

  // Moves every request of `other` to the end of this list.
  void Splice(RequestList& other) {
    if (other.head_ == nullptr) return;
    if (tail_ == nullptr) {
      head_ = other.head_;
    } else {
      Link(tail_)->next = other.head_;
    }
    tail_ = other.tail_;
    other.head_ = other.tail_ = nullptr;
  }

 private:
  static RequestLink* Link(IoRequest* request) { return DriverState<RequestLink>(request); }

  IoRequest* head_ = nullptr;
  IoRequest* tail_ = nullptr;
};

}  // namespace bexd::block
