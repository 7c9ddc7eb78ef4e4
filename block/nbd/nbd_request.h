// SPDX-License-Identifier: GPL-2.0-or-later
// The nbd driver's per-request state, in IoRequest::driver_state: one request may become several
// NBD commands (one per iovec segment and payload limit), all of whose completion callbacks point
// at the request itself, so nothing is allocated per request.
#pragma once

#include <cstdint>

#include "block/request_list.h"

namespace bexd::block {

class NbdConnection;
class NbdSharedQueue;

struct NbdRequestState : RequestLink {
  // The queue that gets the request back when a connection thread serves it; null otherwise.
  NbdSharedQueue* origin = nullptr;
  // The connection whose libnbd handle carries the request's commands.
  NbdConnection* connection = nullptr;
  int64_t result = 0;        // set when the request is finished
  uint32_t commands = 0;     // NBD commands issued and not completed
  int error = 0;             // the first errno a command reported
  bool lost = false;         // a command was cut off by the loss of the connection
  bool flush_after = false;  // a FUA write to a server without FUA: flush once the write is done
  bool extent_seen = false;  // block status: the server described the first extent
  // A flush: the node's writes_acknowledged when it was sent, which it makes durable.
  uint64_t flush_covers = 0;
  uint32_t extent_length = 0;
  uint32_t extent_flags = 0;
};

}  // namespace bexd::block
