// SPDX-License-Identifier: GPL-2.0-or-later
// Engine: writes that need metadata work: allocating clusters and L2 tables, copy-on-write of
// partial clusters, and writes into compressed or shared clusters.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "block/qcow2/engine.h"
#include "block/qcow2/iov_slice.h"
#include "block/qcow2/queue.h"

namespace bexd::block::qcow2 {
namespace {

constexpr uint64_t kZeroBytes = 64 * 1024;
const uint8_t kZeroes[kZeroBytes] = {};

// Appends `length` bytes of `source` from `position` to `iov`.
void AppendSource(std::vector<struct iovec>* iov, const struct iovec* source, int count,
                  uint64_t position, uint64_t length) {
  if (source == nullptr) {
    while (length > 0) {
      uint64_t chunk = std::min(length, kZeroBytes);
      iov->push_back({const_cast<uint8_t*>(kZeroes), chunk});
      length -= chunk;
    }
    return;
  }
  std::vector<struct iovec> room(static_cast<size_t>(count) + 1);
  IovSlice slice = SliceRange(source, count, position, length, room.data(), count + 1);
  iov->insert(iov->end(), slice.iov, slice.iov + slice.count);
}

}  // namespace

bool Engine::InFlight(uint64_t first_cluster, uint64_t count) const {
  if (in_flight_.empty()) return false;
  for (uint64_t i = 0; i < count; ++i) {
    if (in_flight_.count(first_cluster + i)) return true;
  }
  return false;
}

void Engine::MarkInFlight(uint64_t first_cluster, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    in_flight_.emplace(first_cluster + i, std::make_unique<WaitList>(&scheduler_));
  }
}

void Engine::ClearInFlight(uint64_t first_cluster, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    auto it = in_flight_.find(first_cluster + i);
    if (it == in_flight_.end()) continue;
    it->second->WakeAll();
    in_flight_.erase(it);
  }
}

Task<void> Engine::WaitInFlight(uint64_t first_cluster, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    auto it = in_flight_.find(first_cluster + i);
    if (it != in_flight_.end()) {
      co_await it->second->Wait();
      co_return;
    }
  }
}

Task<int64_t> Engine::SelfRead(uint64_t guest_offset, uint64_t length, uint8_t* buffer) {
  uint64_t size = image_->size.load(std::memory_order_acquire);
  uint64_t inside = guest_offset >= size ? 0 : std::min(length, size - guest_offset);
  std::memset(buffer + inside, 0, length - inside);
  if (inside == 0) co_return 0;
  struct iovec iov = {buffer, inside};
  int64_t result = co_await IoAwaiter(&scheduler_, self_.get(),
                                      ChildIo::Make(IoOp::kRead, guest_offset, inside, &iov, 1));
  if (result < 0) co_return result;
  co_return static_cast<uint64_t>(result) == inside ? 0 : -EIO;
}

bool Engine::ReadsAsZero(uint64_t guest_offset, uint64_t entry) const {
  Mapping mapping = ClassifyEntry(g_, entry);
  if (mapping.kind == ClusterKind::kZero) return true;
  if (mapping.kind != ClusterKind::kUnallocated) return false;
  return image_->backing == nullptr || guest_offset >= image_->backing->size();
}

Task<int> Engine::CopyOnWriteRead(uint64_t guest_offset, uint64_t length, uint8_t* buffer,
                                  uint64_t old_entry) {
  if (ReadsAsZero(guest_offset, old_entry)) {
    std::memset(buffer, 0, length);
    co_return 0;
  }
  // Whatever a guest would read there: the backing file, a compressed cluster, or the cluster
  // shared with a snapshot.
  co_return static_cast<int>(co_await SelfRead(guest_offset, length, buffer));
}

Task<int> Engine::WriteRange(uint64_t offset, uint64_t length, Source source, bool fua) {
  if (image_->corrupt.load(std::memory_order_relaxed)) co_return -EIO;
  uint64_t position = offset;
  uint64_t end = offset + length;
  while (position < end) {
    uint64_t l1_index = g_.l1_index(position);
    uint64_t span_end = std::min(end, (l1_index + 1) << (g_.cluster_bits + g_.l2_bits));
    int64_t slab = co_await AcquireWritableTable(l1_index);
    if (slab < 0) co_return static_cast<int>(slab);
    int result = co_await WriteInTable(static_cast<uint32_t>(slab), position, span_end, source,
                                       source.position + (position - offset));
    ReleaseTable(slab);
    if (result < 0) co_return result;
    position = span_end;
  }
  if (fua) co_return co_await Flush();
  co_return 0;
}

Task<int> Engine::WriteInTable(uint32_t slab, uint64_t offset, uint64_t end, Source source,
                               uint64_t source_offset) {
  TableCache& tables = *image_->tables;
  const uint64_t cs = g_.cluster_size;
  uint64_t position = offset;
  while (position < end) {
    uint64_t cluster = position >> g_.cluster_bits;
    if (InFlight(cluster, 1)) {
      // Another write is allocating this cluster: wait, then see what it left.
      co_await WaitInFlight(cluster, 1);
      continue;
    }
    uint64_t l2 = g_.l2_index(position);
    uint64_t entry = tables.entry(slab, l2);
    Mapping mapping = ClassifyEntry(g_, entry);
    uint64_t from = source_offset + (position - offset);
    if (mapping.kind == ClusterKind::kInvalid) {
      MarkCorrupt(fmt::format("invalid L2 entry for guest offset {:#x}", position));
      co_return -EIO;
    }
    if (mapping.kind == ClusterKind::kData && mapping.copied) {
      // In place, over as many contiguous clusters as possible.
      uint64_t run_end = std::min(end, (cluster + 1) << g_.cluster_bits);
      uint64_t host = mapping.host + g_.offset_in_cluster(position);
      while (run_end < end) {
        uint64_t next = (run_end >> g_.cluster_bits);
        Mapping more = ClassifyEntry(g_, tables.entry(slab, g_.l2_index(run_end)));
        if (more.kind != ClusterKind::kData || !more.copied || InFlight(next, 1) ||
            more.host != mapping.host + ((next - cluster) << g_.cluster_bits)) {
          break;
        }
        run_end = std::min(end, run_end + cs);
      }
      int result = EnsureFileSize(g_.cluster_floor(host + (run_end - position) - 1) + cs);
      if (result < 0) co_return result;
      std::vector<struct iovec> iov;
      AppendSource(&iov, source.iov, source.iovcnt, from, run_end - position);
      result =
          co_await io_->WriteV(host, iov.data(), static_cast<int>(iov.size()), run_end - position);
      if (result < 0) co_return result;
      position = run_end;
      continue;
    }

    // Needs a new cluster (or, for a preallocated zero cluster of its own, that one).
    bool reuse = mapping.kind == ClusterKind::kZero && mapping.host != 0 && mapping.copied;
    uint64_t last = (end - 1) >> g_.cluster_bits;
    uint64_t wanted = 1;
    while (!reuse && cluster + wanted <= last && !InFlight(cluster + wanted, 1)) {
      Mapping next = ClassifyEntry(g_, tables.entry(slab, l2 + wanted));
      if ((next.kind == ClusterKind::kData && next.copied) || next.kind == ClusterKind::kInvalid ||
          (next.kind == ClusterKind::kZero && next.host != 0 && next.copied)) {
        break;
      }
      ++wanted;
    }
    MarkInFlight(cluster, wanted);
    uint64_t count = 1;
    bool fresh = false;
    int64_t host = static_cast<int64_t>(mapping.host);
    if (!reuse) {
      host = co_await Allocate(wanted, &count, &fresh);
      if (host < 0) {
        ClearInFlight(cluster, wanted);
        co_return static_cast<int>(host);
      }
      if (count < wanted) ClearInFlight(cluster + count, wanted - count);
    }
    uint64_t run_end = std::min(end, (cluster + count) << g_.cluster_bits);
    uint64_t head = g_.offset_in_cluster(position);
    uint64_t tail = ((cluster + count) << g_.cluster_bits) - run_end;
    uint64_t first_old = entry;
    uint64_t last_old = tables.entry(slab, l2 + count - 1);
    bool head_zero = head == 0 || ReadsAsZero(g_.cluster_floor(position), first_old);
    bool tail_zero = tail == 0 || ReadsAsZero(run_end, last_old);
    std::vector<struct iovec> iov;
    std::unique_ptr<uint8_t[]> head_bytes;
    std::unique_ptr<uint8_t[]> tail_bytes;
    uint64_t write_at = static_cast<uint64_t>(host);
    int result = 0;
    if (fresh && head_zero && tail_zero) {
      // Never-written clusters read as zeroes already: write only the new bytes.
      write_at += head;
    } else if (head > 0) {
      head_bytes = std::make_unique<uint8_t[]>(head);
      result =
          co_await CopyOnWriteRead(g_.cluster_floor(position), head, head_bytes.get(), first_old);
      iov.push_back({head_bytes.get(), head});
    }
    AppendSource(&iov, source.iov, source.iovcnt, from, run_end - position);
    if (result == 0 && tail > 0 && !(fresh && head_zero && tail_zero)) {
      tail_bytes = std::make_unique<uint8_t[]>(tail);
      result = co_await CopyOnWriteRead(run_end, tail, tail_bytes.get(), last_old);
      iov.push_back({tail_bytes.get(), tail});
    }
    uint64_t write_length = 0;
    for (const struct iovec& piece : iov) write_length += piece.iov_len;
    if (result == 0) {
      result =
          co_await io_->WriteV(write_at, iov.data(), static_cast<int>(iov.size()), write_length);
    }
    if (result < 0) {
      if (!reuse) co_await FreeNow(static_cast<uint64_t>(host) >> g_.cluster_bits, count);
      ClearInFlight(cluster, count);
      co_return result;
    }
    data_since_sync_ = true;
    // The data is written: now the entries may point to it.
    MetadataChanged();
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t old = tables.entry(slab, l2 + i);
      tables.set_entry(slab, l2 + i, (static_cast<uint64_t>(host) + i * cs) | kOflagCopied);
      if (!reuse) RecordFree(old, image_->pass_discard_other);
    }
    tables.slab(slab).dirty = true;
    ClearInFlight(cluster, count);
    position = run_end;
  }
  co_return 0;
}

}  // namespace bexd::block::qcow2
