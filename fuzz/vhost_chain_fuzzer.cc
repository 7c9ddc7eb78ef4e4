// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer target: arbitrary guest memory (rings, descriptor tables, FUSE requests) fed through
// the virtqueue parser and the FUSE request core, as a vhost-user-fs queue thread does. Guest
// memory is three separate heap blocks, two of them guest-contiguous, so AddressSanitizer flags
// any access outside a region, including one that runs across a region boundary in host memory.
//
// Input: byte 0 picks the queue size (2^(b % 9)), byte 1 the features (bit 0 EVENT_IDX, bit 1
// INDIRECT_DESC), bytes 2-3 the first available index; the rest fills guest memory from address
// 0, where the available ring (0x0), the descriptor table (0x400) and the used ring (0x1400) live,
// so that short inputs already reach the chain parser. fuzz/seeds.py writes well-formed seeds.
#include <linux/fuse.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "block/null_node.h"
#include "export/vhost_user/guest_memory.h"
#include "export/vhost_user/virtqueue.h"
#include "fuse/queue.h"
#include "fuse/request.h"
#include "fuse/session.h"
#include "util/log.h"

namespace {

using bexd::exports::Chain;
using bexd::exports::GuestMemory;
using bexd::exports::Virtqueue;

constexpr uint64_t kFrontendBase = 0x7f0000000000;
constexpr uint64_t kAvailGpa = 0x0, kDescGpa = 0x400, kUsedGpa = 0x1400;
constexpr int kIovecs = 64;

struct Slot {
  bexd::fuse::Request request;
  uint16_t head = 0;
  bool busy = false;
};

struct Harness {
  Virtqueue ring;
  std::vector<Slot> slots;
};

// The slots' iovec arrays; each chain overwrites what it uses.
struct iovec chain_iovecs[256][kIovecs];

void OnDone(bexd::fuse::Request* request, int64_t result, void* context) {
  auto* harness = static_cast<Harness*>(context);
  auto* slot = static_cast<Slot*>(request->transport);
  slot->busy = false;
  if (!harness->ring.started()) return;  // the harness's own INIT
  if (result < 0) {
    harness->ring.MarkBroken("not a FUSE request");
  } else {
    harness->ring.PushUsed(slot->head, static_cast<uint32_t>(result));
  }
}

// A well-formed INIT through the core, so that the fuzzed requests reach the opcode handlers.
void Initialize(bexd::fuse::Queue& queue, Slot& slot) {
  struct {
    struct fuse_in_header header;
    struct fuse_init_in init;
  } in = {};
  in.header.len = sizeof(in);
  in.header.opcode = FUSE_INIT;
  in.header.unique = 1;
  in.init.major = FUSE_KERNEL_VERSION;
  in.init.minor = FUSE_KERNEL_MINOR_VERSION;
  in.init.flags = FUSE_MAX_PAGES | FUSE_INIT_EXT;
  unsigned char out[256];
  struct iovec in_iov = {&in, sizeof(in)};
  struct iovec out_iov = {out, sizeof(out)};
  slot.request.in = &in_iov;
  slot.request.in_count = 1;
  slot.request.out = &out_iov;
  slot.request.out_count = 1;
  slot.busy = true;
  queue.Dispatch(&slot.request);
  queue.io_queue().Poll();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  bexd::log::SetLevel(bexd::log::Level::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint32_t queue_size = 1u << (data[0] % 9);
  const bool event_idx = data[1] & 1;
  const bool indirect = data[1] & 2;
  uint16_t next_avail;
  memcpy(&next_avail, data + 2, sizeof(next_avail));
  data += 4;
  size -= 4;

  // Regions: [0, 32K) and [32K, 64K) (guest-contiguous, separate host blocks), [128K, 132K).
  const uint64_t gpas[3] = {0x0, 0x8000, 0x20000};
  const uint64_t sizes[3] = {0x8000, 0x8000, 0x1000};
  std::vector<std::unique_ptr<unsigned char[]>> blocks;
  std::vector<GuestMemory::BorrowedRegion> regions;
  size_t consumed = 0;
  for (int i = 0; i < 3; ++i) {
    blocks.emplace_back(new unsigned char[sizes[i]]());
    size_t n = std::min<size_t>(sizes[i], size - consumed);
    memcpy(blocks.back().get(), data + consumed, n);
    consumed += n;
    regions.push_back({{gpas[i], sizes[i], kFrontendBase + gpas[i], 0}, blocks.back().get()});
  }
  absl::StatusOr<std::unique_ptr<GuestMemory>> memory = GuestMemory::Borrow(regions);
  if (!memory.ok()) __builtin_trap();

  bexd::block::NullOptions null_options;
  null_options.size = 1 << 20;
  null_options.read_zeroes = true;
  auto node = bexd::block::OpenNullNode("fuzz", null_options, false);
  if (!node.ok()) __builtin_trap();
  bexd::fuse::SessionOptions session_options;
  session_options.writable = true;
  session_options.directory_root = true;
  session_options.file_name = "disk";
  auto session = bexd::fuse::Session::Create(*node, session_options);
  if (!session.ok()) __builtin_trap();
  auto io = (*node)->CreateQueue();
  if (!io.ok()) __builtin_trap();

  auto harness = std::make_unique<Harness>();
  bexd::fuse::Queue queue(*session, std::move(*io), &OnDone, harness.get());
  harness->slots.resize(queue_size);
  for (Slot& slot : harness->slots) slot.request.transport = &slot;
  Initialize(queue, harness->slots[0]);

  bexd::exports::VirtqueueLayout layout;
  layout.size = queue_size;
  layout.desc_addr = kFrontendBase + kDescGpa;
  layout.avail_addr = kFrontendBase + kAvailGpa;
  layout.used_addr = kFrontendBase + kUsedGpa;
  layout.next_avail = next_avail;
  layout.event_idx = event_idx;
  layout.indirect = indirect;
  if (!harness->ring.Start(layout, memory->get()).ok()) __builtin_trap();

  // As a queue thread does: take chains while slots are free, let the I/O complete, publish.
  for (uint32_t round = 0; round < 2 * queue_size; ++round) {
    harness->ring.DisableKick();
    bool progress = false;
    for (uint32_t i = 0; i < queue_size; ++i) {
      Slot& slot = harness->slots[i];
      if (slot.busy) continue;
      Chain chain;
      Virtqueue::PopResult result = harness->ring.Pop(chain_iovecs[i], kIovecs, &chain);
      if (result != Virtqueue::PopResult::kChain) break;
      progress = true;
      slot.busy = true;
      slot.head = chain.head;
      slot.request.in = chain.iov;
      slot.request.in_count = chain.readable;
      slot.request.out = chain.iov + chain.readable;
      slot.request.out_count = chain.writable;
      queue.Dispatch(&slot.request);
    }
    queue.io_queue().Poll();
    harness->ring.FlushUsed();
    if (!progress || harness->ring.broken()) break;
    harness->ring.EnableKick();
  }
  // Complete what is still in flight before the memory goes away, as Stop() does.
  while (queue.io_queue().in_flight() > 0) queue.io_queue().Poll();
  harness->ring.FlushUsed();
  return 0;
}
