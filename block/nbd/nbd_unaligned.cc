// SPDX-License-Identifier: GPL-2.0-or-later
// Reads, writes and write-zeroes that are not aligned to the server's minimum block size, and
// reads and writes whose memory comes in pieces that end inside a block. The NBD protocol lets a
// server refuse such commands and libnbd does not send them (its commands take one piece of
// memory each), so, as QEMU's block layer does, they go through a bounce buffer of whole blocks:
// a read reads the blocks and copies out its part; a write reads the blocks it covers only partly,
// merges its bytes in and writes the blocks back. A write-zeroes bounces only its partial head and
// tail blocks and zeroes the whole blocks between. A read-modify-write holds its blocks in the
// node's NbdBlockLock from the first read to the last write, so that two writes into different
// bytes of one block (two clients, or two queues of one) both land.
#include <algorithm>
#include <cstring>

#include "block/iov_util.h"
#include "block/nbd/nbd_connection.h"
#include "util/align.h"

namespace bexd::block {
namespace {

using util::AlignDown;
using util::AlignUp;

// Bounce buffers are at least this large (a write-zeroes' two blocks), so that most requests
// reuse one.
constexpr uint64_t kMinBounce = 2 * uint64_t{kNbdMaxMinBlock};

NbdRequestState* StateOf(IoRequest* request) { return DriverState<NbdRequestState>(request); }

}  // namespace

bool NbdConnection::Unaligned(const IoRequest& request) const {
  // Once on this path a request stays on it, also across a reconnection.
  if (DriverState<NbdRequestState>(const_cast<IoRequest*>(&request))->phase !=
      NbdUnalignedPhase::kNone) {
    return true;
  }
  const uint32_t block = MinBlock();
  if (block <= 1 || request.length == 0) return false;
  if (request.offset % block != 0 || request.length % block != 0) return true;
  if (!HasData(request.op)) return false;
  // Each piece of memory becomes its own command, so each must end on a block boundary.
  uint64_t position = 0;
  for (int i = 0; i + 1 < request.iovcnt; ++i) {
    position += request.iov[i].iov_len;
    if (position % block != 0) return true;
  }
  return false;
}

char* NbdConnection::TakeBounce(uint64_t size) {
  Bounce* best = nullptr;
  for (Bounce& bounce : bounces_) {
    if (!bounce.taken && bounce.size >= size && (best == nullptr || bounce.size < best->size)) {
      best = &bounce;
    }
  }
  if (best == nullptr) {
    size = std::max(size, kMinBounce);
    best = &bounces_.emplace_back(
        Bounce{.data = std::make_unique_for_overwrite<char[]>(size), .size = size});
  }
  best->taken = true;
  return best->data.get();
}

char* NbdConnection::Bounced(IoRequest* request, uint64_t offset) {
  NbdRequestState* state = StateOf(request);
  if (request->op == IoOp::kWriteZeroes) {
    return offset == state->head ? state->bounce : state->bounce + state->block;
  }
  return state->bounce + (offset - AlignDown(request->offset, state->block));
}

bool NbdConnection::IssueUnaligned(IoRequest* request) {
  NbdRequestState* state = StateOf(request);
  const uint64_t end = request->offset + request->length;
  if (state->phase == NbdUnalignedPhase::kNone) {
    const uint32_t block = MinBlock();  // at most kNbdMaxMinBlock (CheckBlockSizes)
    state->block = block;
    const uint64_t first = AlignDown(request->offset, block);
    const uint64_t last = AlignDown(end - 1, block);
    state->head = request->offset != first || end < first + block ? first : kNoBlock;
    state->tail = last != first && end != last + block ? last : kNoBlock;
    state->bounce = TakeBounce(request->op == IoOp::kWriteZeroes ? 2 * uint64_t{block}
                                                                 : AlignUp(end, block) - first);
    if (request->op == IoOp::kRead) {
      state->phase = NbdUnalignedPhase::kRead;
    } else if (state->head != kNoBlock || state->tail != kNoBlock) {
      state->phase = NbdUnalignedPhase::kLocking;
    } else {
      // Whole blocks in memory pieces that end inside blocks: nothing to read first.
      IovCursor(request->iov, request->iovcnt, 0).CopyOut(state->bounce, request->length);
      state->phase = NbdUnalignedPhase::kWrite;
    }
  }
  const uint32_t block = state->block;
  const uint64_t first = AlignDown(request->offset, block);
  // The export's size is a multiple of the block size (CheckBlockSizes), so whole blocks fit.
  const uint64_t span = AlignUp(end, block) - first;
  switch (state->phase) {
    case NbdUnalignedPhase::kLocking:
      if (!state->holds_lock && !link_.block_lock.Lock(request, first, AlignUp(end, block))) {
        return false;
      }
      state->phase = NbdUnalignedPhase::kReadEdges;
      [[fallthrough]];
    case NbdUnalignedPhase::kReadEdges:
      for (uint64_t edge : {state->head, state->tail}) {
        if (edge == kNoBlock) continue;
        SendData(request, edge, block, Bounced(request, edge), false, 0);
      }
      break;
    case NbdUnalignedPhase::kWrite:
      if (request->op != IoOp::kWriteZeroes) {
        SendData(request, first, span, state->bounce, true, state->write_flags);
        break;
      }
      for (uint64_t edge : {state->head, state->tail}) {
        if (edge == kNoBlock) continue;
        SendData(request, edge, block, Bounced(request, edge), true, state->write_flags);
      }
      if (const uint64_t start = AlignUp(request->offset, block), stop = AlignDown(end, block);
          start < stop && !state->lost && state->error == 0) {
        IssueZeroes(request, start, stop);
      }
      break;
    case NbdUnalignedPhase::kRead:
      SendData(request, first, span, state->bounce, false, 0);
      break;
    case NbdUnalignedPhase::kNone:
      break;
  }
  return true;
}

bool NbdConnection::AdvanceUnaligned(IoRequest* request) {
  NbdRequestState* state = StateOf(request);
  char* const data = state->bounce + (request->offset % state->block);  // reads and writes
  switch (state->phase) {
    case NbdUnalignedPhase::kReadEdges:
      if (request->op == IoOp::kWriteZeroes) {
        const uint64_t end = request->offset + request->length;
        if (state->head != kNoBlock) {
          std::memset(Bounced(request, state->head) + (request->offset - state->head), 0,
                      std::min(end, state->head + state->block) - request->offset);
        }
        if (state->tail != kNoBlock) {
          std::memset(Bounced(request, state->tail), 0, end - state->tail);
        }
      } else {
        IovCursor(request->iov, request->iovcnt, 0).CopyOut(data, request->length);
      }
      state->phase = NbdUnalignedPhase::kWrite;
      state->commands = 1;  // as in Issue(): held while the phase's commands go out
      IssueUnaligned(request);
      if (--state->commands == 0) completed_.PushBack(request);
      return true;
    case NbdUnalignedPhase::kRead:
      IovCursor(request->iov, request->iovcnt, 0).CopyIn(data, request->length);
      return false;
    default:
      return false;  // kWrite: the written request goes on as any write
  }
}

void NbdConnection::EndUnaligned(IoRequest* request) {
  NbdRequestState* state = StateOf(request);
  if (state->phase == NbdUnalignedPhase::kNone) return;
  if (state->holds_lock) link_.block_lock.Unlock(request);
  for (Bounce& bounce : bounces_) {
    if (bounce.data.get() == state->bounce) bounce.taken = false;
  }
  state->bounce = nullptr;
  state->phase = NbdUnalignedPhase::kNone;
}

}  // namespace bexd::block
