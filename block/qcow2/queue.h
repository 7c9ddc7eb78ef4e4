// SPDX-License-Identifier: GPL-2.0-or-later
// One queue thread's I/O context on a qcow2 node. Reads, writes into allocated clusters and block
// status are served here without a lock: the queue maps guest ranges through the lock-free L1/L2
// lookups of TableCache and submits child requests to its own queues on the file child and the
// backing node, created on this thread. Whatever needs a metadata change or a table that is not
// cached goes to the node's metadata engine (engine.h), which hands the request back through this
// queue's inbox and eventfd, like the file driver's workers.
//
// Per-request state lives in IoRequest::driver_state; child requests come from a pool of
// sub-requests preallocated per queue, and compressed clusters from a small pool of buffers
// allocated on first use. A request that finds a pool empty waits in a list and continues when a
// child request completes, so the hot path never allocates.
//
// Small sequential requests come in runs that want the same cluster. A write whose cluster this
// queue already has an allocating write for at the engine waits here until that write is back,
// then writes in place (one engine round trip per allocation, not per request); a read of a
// compressed cluster that is being read and inflated waits for it, and the last few inflated
// clusters are kept (one inflate per cluster, not per request).
#pragma once

#include <absl/status/statusor.h>
#include <sys/uio.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "block/block_node.h"
#include "block/qcow2/decompress.h"
#include "block/qcow2/grace.h"
#include "block/qcow2/image_state.h"
#include "block/qcow2/request_state.h"
#include "block/request_list.h"

namespace bexd::block::qcow2 {

class Qcow2Queue final : public IoQueue {
 public:
  static constexpr uint32_t kSubRequests = 256;
  static constexpr int kSubIovs = 16;

  // `owner` keeps the node alive while the queue exists (null for the engine's own queue).
  static absl::StatusOr<std::unique_ptr<Qcow2Queue>> Create(ImageState* image,
                                                            std::shared_ptr<const void> owner);
  // Waits until the engine has handed back every request it holds and the child queues have
  // finished; callbacks of requests still under way never run.
  ~Qcow2Queue() override;

  void Submit(IoRequest* request) override;
  void Poll() override;
  int event_fd() const override { return epoll_fd_; }
  // Its own eventfd and its children's wait fds, which its epoll set watches (no epoll set of a
  // child nests in it, however long the backing chain).
  void AppendWaitFds(std::vector<int>* fds) const override;
  uint32_t in_flight() const override { return in_flight_; }
  // Data clusters are read and written in the caller's buffers; tables, compressed clusters and
  // copy-on-write use the queue's own.
  void UseBuffers(std::span<const struct iovec> regions) override { file_->UseBuffers(regions); }
  // The children's fds sit in this queue's epoll set, which the waiter then watches
  // edge-triggered, and every Poll() polls every child: they can be edge-triggered in the set
  // too, and their queues stop clearing them.
  void SetEdgeTriggeredWaiter() override;

  // The engine hands a request back (any thread); the queue picks it up in its next Poll().
  void Reply(IoRequest* request);
  // Whether a child that completes inside Poll() (no event fd) has requests under way, so the
  // owner must poll again without waiting.
  bool needs_polling() const;

 private:
  struct SubRequest;
  // One compressed cluster: being read and inflated (`filling`), inflated, or none (entry 0).
  struct CompressedBuffer {
    // The compressed bytes (up to two clusters) at `data_skip`, in a read aligned for the file
    // child so that O_DIRECT needs no bounce buffer.
    uint8_t* in = nullptr;
    uint64_t data_skip = 0;
    uint64_t data_length = 0;
    std::unique_ptr<uint8_t[]> out;  // one cluster
    // The L2 entry the cluster was read for. bexd never writes compressed clusters, so the bytes
    // an entry points to never change while any L2 entry still holds it.
    uint64_t entry = 0;
    bool filling = false;
    uint64_t last_use = 0;
    SubRequest* waiters = nullptr;  // parts of reads that want the cluster being filled
  };
  // A child request made for part of a request, or a part of a read waiting for a compressed
  // cluster another part is filling.
  struct SubRequest {
    IoRequest io;
    IoRequest* parent = nullptr;
    Qcow2Queue* queue = nullptr;
    SubRequest* next = nullptr;          // the free list, or a compressed buffer's waiters
    CompressedBuffer* buffer = nullptr;  // the compressed buffer this child read fills
    uint64_t parent_position = 0;        // compressed reads: where the cluster's bytes go
    uint64_t cluster_skip = 0;           // compressed reads: cluster bytes before them
    uint64_t copy_length = 0;
    struct iovec iov[kSubIovs];
  };
  // A write at the engine that may allocate (its first cluster needed the engine), and the
  // writes of this queue that want one of its clusters and wait for it to come back.
  struct AllocatingWrite {
    IoRequest* writer = nullptr;  // null: the entry is free
    uint64_t first_cluster = 0;
    uint64_t end_cluster = 0;  // exclusive
    RequestList waiters;
  };
  // Sized for a queue depth of 16 runs of sequential writes; beyond that, writes go to the
  // engine one by one, which serves them correctly, only slower.
  static constexpr int kAllocatingWrites = 16;
  enum class Kind : uint8_t { kData, kZero, kBacking, kCompressed, kMiss, kInvalid, kEngine };
  struct Extent {
    Kind kind = Kind::kZero;
    uint64_t length = 0;
    uint64_t host = 0;  // kData: the host offset of the first byte; kCompressed: the L2 entry
  };

  Qcow2Queue(ImageState* image, std::shared_ptr<const void> owner);
  absl::Status Init();

  // Maps [offset, offset+max_length) from its start while the mapping stays the same kind (and,
  // for data, contiguous on the host). `write` asks whether the range can be written in place.
  Extent Map(uint64_t offset, uint64_t max_length, bool write, const TableCopy* copy) const;
  bool LookupEntry(uint64_t l1_index, uint64_t table, uint64_t l2_index, const TableCopy* copy,
                   uint64_t* entry, uint64_t* bitmap) const;

  // Issues what it can of the request from state->done on; stalls when a pool is empty, hands
  // the rest to the engine when it needs metadata work, completes it when nothing is left.
  void Continue(IoRequest* request);
  bool ContinueReadWrite(IoRequest* request);
  void ContinueBlockStatus(IoRequest* request);
  bool IssueChild(IoRequest* parent, IoQueue* child, IoOp op, uint64_t child_offset,
                  uint64_t length, uint32_t flags);
  bool IssueCompressed(IoRequest* parent, uint64_t entry, uint64_t length);
  void ToEngine(IoRequest* request);
  // A write whose range from `offset` needs the engine: waits for this queue's allocating write
  // of the same cluster if there is one, otherwise goes to the engine as one.
  void WriteThroughEngine(IoRequest* request, uint64_t offset);
  // An allocating write is back from the engine: the writes waiting for it continue.
  void AllocationLanded(IoRequest* writer);
  void Fail(IoRequest* request, int64_t error);
  void MaybeComplete(IoRequest* request);
  void CompleteLater(IoRequest* request, int64_t result);
  void ReportCorruption(uint64_t guest_offset);

  static void OnChildDone(IoRequest* io, int64_t result);
  void ChildDone(SubRequest* sub, int64_t result);
  // The child read of a compressed cluster finished with `result`: inflates the cluster and hands
  // it to every part that waited. Returns the error of the child read's own part (or 0).
  int64_t FinishCompressed(SubRequest* sub, int64_t result);
  void CopyCompressed(SubRequest* part, const CompressedBuffer& buffer);
  SubRequest* TakeSub();
  void ReleaseSub(SubRequest* sub);
  // The buffer that holds or is filling the cluster of `entry`, or null.
  CompressedBuffer* FindBuffer(uint64_t entry);
  // A buffer to fill: one that holds nothing, else the least recently used one not filling; null
  // if all are filling (or the buffers cannot be allocated).
  CompressedBuffer* ClaimBuffer();
  void TakeReplies();
  void ResumeStalled();

  ImageState* const image_;
  const Geometry geometry_;
  const uint64_t file_alignment_;  // the file child's request alignment
  std::shared_ptr<const void> owner_;
  int event_fd_ = -1;  // the engine's replies
  int epoll_fd_ = -1;  // event_fd_ and the child queues' fds
  std::unique_ptr<IoQueue> file_;
  std::unique_ptr<IoQueue> backing_;
  GraceDomain::Reader* grace_reader_ = nullptr;

  std::unique_ptr<SubRequest[]> subs_;
  SubRequest* free_subs_ = nullptr;
  struct FreeMemory {
    void operator()(uint8_t* memory) const { free(memory); }
  };
  std::unique_ptr<uint8_t, FreeMemory> compressed_memory_;  // every buffer's `in`
  std::unique_ptr<CompressedBuffer[]> buffers_;
  uint32_t buffer_count_ = 0;
  uint64_t buffer_clock_ = 0;  // orders the buffers' last uses
  std::unique_ptr<Decompressor> decompressor_;

  AllocatingWrite allocating_[kAllocatingWrites];

  RequestList stalled_;
  RequestList to_engine_;
  RequestList completed_;
  uint32_t in_flight_ = 0;
  uint32_t to_engine_count_ = 0;
  uint32_t at_engine_ = 0;
  bool took_replies_ = false;
  bool children_submitted_ = false;

  std::mutex inbox_mutex_;
  std::condition_variable inbox_ready_;
  RequestList inbox_;
};

}  // namespace bexd::block::qcow2
