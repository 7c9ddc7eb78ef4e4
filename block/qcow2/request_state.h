// SPDX-License-Identifier: GPL-2.0-or-later
// The qcow2 driver's per-request state in IoRequest::driver_state, shared by the queue thread that
// owns the request and, while it holds the request, the metadata engine.
#pragma once

#include <cstdint>
#include <memory>

#include "block/io_request.h"
#include "block/request_list.h"

namespace bexd::block::qcow2 {

class Qcow2Queue;

// Entries of one L2 table the engine copied for a request it hands back after loading the table,
// so the queue can go on even if the cache evicts the table again meanwhile.
struct TableCopy {
  uint64_t l1_index = 0;
  uint64_t table_offset = 0;
  uint64_t first = 0;  // the first L2 index copied
  uint64_t count = 0;
  std::unique_ptr<uint64_t[]> words;  // count entries (count pairs with extended L2 entries)
};

enum class Reply : uint8_t {
  kNone,
  kDone,    // the engine finished the part of the request from `done` on, with reply_result
  kResume,  // the engine loaded a table; the queue carries on from `done` (with `copy`)
};

struct RequestState : RequestLink {
  Qcow2Queue* queue = nullptr;
  // Bytes from the start of the request that are complete or under way.
  uint64_t done = 0;
  int64_t error = 0;     // the first error of any part
  uint32_t pending = 0;  // parts under way (child requests, the engine's part)
  uint32_t grace_slot = 0;
  bool in_grace = false;
  bool stalled = false;  // waits for a free sub-request or compressed-cluster buffer
  // Writes: the entry of the queue's allocating writes this request holds while at the engine
  // (-1: none), and whether it waits in another entry's waiters.
  int8_t allocating = -1;
  bool waits_for_allocation = false;
  uint64_t status_length = 0;  // kBlockStatus: the extent found
  // Set by the engine when it hands the request back; read by the queue thread afterwards.
  Reply reply = Reply::kNone;
  int64_t reply_result = 0;
  TableCopy* copy = nullptr;  // owned by the request once handed back
};

inline RequestState* StateOf(IoRequest* request) { return DriverState<RequestState>(request); }

}  // namespace bexd::block::qcow2
