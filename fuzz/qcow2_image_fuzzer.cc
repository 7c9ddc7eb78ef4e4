// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer target: arbitrary bytes as a qcow2 image file (headers, extensions, L1/L2/refcount
// tables, snapshot tables, compressed clusters), opened through the qcow2 driver over an in-memory
// file node, read-only and then writable, and read, written, discarded and flushed as a guest
// would. Any crash, sanitizer report, leak or read past a buffer is a bug.
//
// Input: byte 0 picks options (bit 0: a backing node, bit 1: lazy refcounts, bit 2: a tiny L2
// cache); the rest is the image. fuzz/qcow2_seeds.sh makes well-formed seed images with qemu-img.
#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "block/block_node.h"
#include "block/options.h"
#include "block/qcow2/node.h"
#include "fuzz/memory_node.h"
#include "util/log.h"

namespace {

using bexd::block::BlockNode;
using bexd::block::IoOp;
using bexd::block::IoQueue;
using bexd::block::IoRequest;
using bexd::fuzz::MemoryNode;

// How far the image file may grow through allocating writes.
constexpr uint64_t kMaxFileSize = uint64_t{64} << 20;
constexpr uint64_t kIoBytes = 64 * 1024;

struct Completion {
  bool done = false;
  int64_t result = 0;
};

int64_t Run(IoQueue& queue, IoOp op, uint64_t offset, uint64_t length, void* buffer,
            uint32_t flags = 0) {
  struct iovec iov = {buffer, length};
  IoRequest request;
  request.op = op;
  request.offset = offset;
  request.length = length;
  request.flags = flags;
  if (op == IoOp::kRead || op == IoOp::kWrite) {
    request.iov = &iov;
    request.iovcnt = 1;
  }
  Completion completion;
  request.opaque = &completion;
  request.done = [](IoRequest* r, int64_t result) {
    auto* c = static_cast<Completion*>(r->opaque);
    c->done = true;
    c->result = result;
  };
  queue.Submit(&request);
  queue.Poll();
  while (!completion.done) {
    // The metadata thread replies through the queue's fd.
    struct pollfd pfd = {queue.event_fd(), POLLIN, 0};
    poll(&pfd, 1, 10);
    queue.Poll();
  }
  return completion.result;
}

// Offsets worth touching in an image of `size` bytes: the start, the middle, the end.
std::vector<uint64_t> Offsets(uint64_t size, const uint8_t* data, size_t length) {
  std::vector<uint64_t> offsets = {0};
  if (size > kIoBytes) {
    uint64_t salt = 0;
    std::memcpy(&salt, data, std::min<size_t>(length, sizeof(salt)));
    offsets.push_back((size / 2 + salt % kIoBytes) % (size - kIoBytes));
    offsets.push_back(size - kIoBytes + 123);
  }
  return offsets;
}

void Exercise(BlockNode& node, const uint8_t* data, size_t length, bool writable) {
  auto queue = node.CreateQueue();
  if (!queue.ok()) return;
  uint64_t size = node.size();
  std::vector<uint8_t> buffer(kIoBytes);
  std::vector<uint8_t> pattern(kIoBytes);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 1);
  for (uint64_t offset : Offsets(size, data, length)) {
    uint64_t n = std::min<uint64_t>(kIoBytes, size - std::min(size, offset));
    if (n == 0) continue;
    Run(**queue, IoOp::kRead, offset, n, buffer.data());
    Run(**queue, IoOp::kBlockStatus, offset, size - offset, nullptr);
    if (!writable) continue;
    // No read-back check: a damaged refcount can make the allocator hand out a cluster another
    // entry still maps (QEMU behaves the same), so only memory safety is checked here; the qemu-img
    // tests check that data reads back.
    Run(**queue, IoOp::kWrite, offset + 1, n - 1, pattern.data());
    Run(**queue, IoOp::kRead, offset + 1, n - 1, buffer.data());
    Run(**queue, IoOp::kWriteZeroes, offset, n / 2, nullptr, bexd::block::kIoMayUnmap);
    Run(**queue, IoOp::kDiscard, offset, n, nullptr);
    Run(**queue, IoOp::kFlush, 0, 0, nullptr);
  }
  if (writable && size < (uint64_t{1} << 40)) {
    (void)node.Truncate(size + kIoBytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  bexd::log::SetLevel(bexd::log::Level::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  std::vector<uint8_t> image(data + 1, data + size);
  bexd::block::Qcow2Options options;
  options.discard = bexd::block::DiscardMode::kUnmap;
  if (flags & 2) options.lazy_refcounts = true;
  if (flags & 4) options.l2_cache_size = 1;  // the minimum: two tables
  std::shared_ptr<BlockNode> backing;
  if (flags & 1) {
    std::vector<uint8_t> bytes(256 * 1024);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i / 512);
    backing = std::make_shared<MemoryNode>("backing", std::move(bytes), true, 0);
  }
  for (bool writable : {false, true}) {
    auto file = std::make_shared<MemoryNode>("file", image, !writable, kMaxFileSize);
    auto node = bexd::block::qcow2::Qcow2Node::Open("fuzz", options, !writable, file, backing);
    if (!node.ok()) continue;
    Exercise(**node, data, size, writable);
  }
  return 0;
}
