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
#pragma once

#include <absl/status/statusor.h>
#include <sys/uio.h>

#include <condition_variable>
#include <cstdint>
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
  struct CompressedBuffer {
    std::unique_ptr<uint8_t[]> in;   // compressed bytes, up to two clusters
    std::unique_ptr<uint8_t[]> out;  // one cluster
    CompressedBuffer* next_free = nullptr;
  };
  // A child request made for part of a request.
  struct SubRequest {
    IoRequest io;
    IoRequest* parent = nullptr;
    Qcow2Queue* queue = nullptr;
    SubRequest* next_free = nullptr;
    CompressedBuffer* buffer = nullptr;  // compressed reads
    uint64_t parent_position = 0;        // compressed reads: where the cluster's bytes go
    uint64_t cluster_skip = 0;           // compressed reads: cluster bytes before them
    uint64_t copy_length = 0;
    struct iovec iov[kSubIovs];
  };
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
  void Fail(IoRequest* request, int64_t error);
  void MaybeComplete(IoRequest* request);
  void CompleteLater(IoRequest* request, int64_t result);
  void ReportCorruption(uint64_t guest_offset);

  static void OnChildDone(IoRequest* io, int64_t result);
  void ChildDone(SubRequest* sub, int64_t result);
  void FinishCompressed(SubRequest* sub, IoRequest* parent);
  SubRequest* TakeSub();
  void ReleaseSub(SubRequest* sub);
  CompressedBuffer* TakeBuffer();
  void TakeReplies();
  void ResumeStalled();

  ImageState* const image_;
  const Geometry geometry_;
  std::shared_ptr<const void> owner_;
  int event_fd_ = -1;  // the engine's replies
  int epoll_fd_ = -1;  // event_fd_ and the child queues' fds
  std::unique_ptr<IoQueue> file_;
  std::unique_ptr<IoQueue> backing_;
  GraceDomain::Reader* grace_reader_ = nullptr;

  std::unique_ptr<SubRequest[]> subs_;
  SubRequest* free_subs_ = nullptr;
  std::unique_ptr<CompressedBuffer[]> buffers_;
  uint32_t buffer_count_ = 0;
  CompressedBuffer* free_buffers_ = nullptr;
  std::unique_ptr<Decompressor> decompressor_;

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
