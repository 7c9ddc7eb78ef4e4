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

enum class NbdUnalignedPhase : uint8_t {
  kNone,       // aligned, or not started
  kLocking,    // a write waiting in the node's NbdBlockLock
  kReadEdges,  // a write reading its partly covered head and tail blocks
  kWrite,      // a write sending its blocks, merged with what it writes
  kRead,       // a read reading its blocks
};

inline constexpr uint64_t kNoBlock = ~uint64_t{0};

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

  // A read, write or write-zeroes not aligned to the server's minimum block size
  // (nbd_unaligned.cc): where it is, and its blocks in a bounce buffer.
  NbdUnalignedPhase phase = NbdUnalignedPhase::kNone;
  uint32_t block = 0;        // the minimum block size it is aligned to
  char* bounce = nullptr;    // every block it touches; for write-zeroes only the head and tail
  uint64_t head = kNoBlock;  // offset of the partly covered first block, if any
  uint64_t tail = kNoBlock;  // offset of the partly covered last block, if other than head
  uint32_t write_flags = 0;  // for the data writes (FUA)
  uint32_t zero_flags = 0;   // for the zeroes of a write-zeroes' whole blocks
  // NbdBlockLock: the blocks a read-modify-write holds or waits for.
  IoRequest* lock_next = nullptr;
  uint64_t lock_start = 0;
  uint64_t lock_end = 0;
  bool holds_lock = false;
};

}  // namespace bexd::block
