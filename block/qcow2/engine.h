// SPDX-License-Identifier: GPL-2.0-or-later
// The metadata engine of one qcow2 node: a thread that makes every metadata change (loading L2
// tables into the cache, allocating clusters and L2 tables, refcount updates, copy-on-write,
// discard, write-zeroes, resizing, writing the caches back) and serves the requests queue threads
// cannot serve without one. Many such operations run at once as coroutines (task.h) on this one
// thread, each suspended while its child I/O is under way, so allocations overlap and batch
// without locks: in-memory metadata changes between two suspensions are atomic.
//
// Crash consistency (see docs/qcow2.md): a new cluster gets its refcount before anything points
// to it, its data is written before the L2 entry that points to it is set, and tables reach the
// disk only in writeback cycles that write refcount blocks, flush, write L2 tables, flush, write
// L1 entries. A reference is removed on disk before the refcount drops, and a freed cluster is
// reused only after every queue thread that might still use it through an old mapping is done
// (grace.h).
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <sys/uio.h>

#include <atomic>
#include <bitset>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "block/qcow2/child_io.h"
#include "block/qcow2/grace.h"
#include "block/qcow2/header.h"
#include "block/qcow2/image_state.h"
#include "block/qcow2/refcount_cache.h"
#include "block/qcow2/snapshots.h"
#include "block/qcow2/task.h"
#include "block/request_list.h"

namespace bexd::block::qcow2 {

class Qcow2Queue;

class Engine {
 public:
  struct Config {
    bool lazy_refcounts = false;
    uint32_t refcount_cache_blocks = 4;
    uint64_t cache_clean_interval_s = 600;
  };
  // What opening the image read and validated.
  struct Loaded {
    ImageHeader header;
    std::vector<uint64_t> l1;        // the L1 table as on disk
    std::vector<uint64_t> reftable;  // refcount block offsets (0: none)
    std::vector<SnapshotInfo> snapshots;
    uint64_t snapshot_table_bytes = 0;
    uint64_t file_size = 0;
  };

  // Starts the thread, which creates its own queues on the file child (and the node).
  static absl::StatusOr<std::unique_ptr<Engine>> Start(ImageState* image, const Config& config,
                                                       Loaded loaded);
  // Stops the thread; Close() first to write everything back.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Any thread: requests a queue cannot serve alone. Each comes back through its queue's Reply.
  void Post(RequestList& requests);
  // Any thread: a queue found a damaged mapping.
  void ReportCorruption(std::string what);
  // Blocking, any thread: grows or shrinks the virtual size.
  absl::Status Resize(uint64_t new_size);
  // Blocking: writes every cache back, drops freed clusters, marks the image clean and stops the
  // thread. The node's queues must be gone.
  absl::Status Close();
  // Any thread: the header's dirty bit is set (lazy refcounts since the first allocation).
  bool image_dirty() const { return dirty_bit_on_disk_; }

 private:
  // A control-path call waiting for the engine thread.
  struct Control {
    enum class Kind { kResize, kClose, kStop } kind = Kind::kStop;
    uint64_t size = 0;
    std::promise<absl::Status> done;
  };
  // A reference dropped from the image; the refcount goes down once that is durable and no queue
  // thread can still be using the clusters.
  struct Decrease {
    uint64_t first_cluster = 0;
    uint64_t count = 0;
    bool discard = false;  // pass the freed clusters on to the file child (discard=unmap, shrink)
  };
  struct GraceBatch {
    explicit GraceBatch(GraceDomain* domain) : period(domain) {}
    GraceDomain::Period period;
    uint64_t sequence = 0;  // batches are queued in this order
    std::vector<Decrease> decreases;
  };
  // What a write takes its bytes from: the request's iovec from `position`, or zeroes.
  struct Source {
    const struct iovec* iov = nullptr;
    int iovcnt = 0;
    uint64_t position = 0;
  };
  // kDrop: entries past a shrunk end go, whatever a backing file holds there.
  enum class Change { kDiscard, kZero, kZeroUnmap, kDrop };

  Engine(ImageState* image, const Config& config, Loaded loaded);

  // ---- engine.cc: the thread, intake, replies.
  void Run(std::promise<absl::Status>* started);
  absl::Status SetUp();
  void TakeIncoming();
  absl::Status RunControl(Control::Kind kind, uint64_t size);
  Task<void> HandleRequest(IoRequest* request);
  Task<void> HandleControl(std::shared_ptr<Control> control);
  void ReplyDone(IoRequest* request, int64_t result);
  void MarkCorrupt(const std::string& what);
  Task<void> WriteCorruptBit();
  void Wake();
  int PollTimeoutMs() const;

  // ---- engine_tables.cc: the L1 table and the L2 cache.
  Task<int64_t> AcquireTable(uint64_t l1_index);
  Task<int64_t> AcquireWritableTable(uint64_t l1_index);
  void ReleaseTable(int64_t slab);
  Task<int64_t> ClaimSlab();
  Task<int> LoadTable(uint64_t l1_index, uint64_t table_offset, uint32_t slab);
  // The metadata other than an L2 table that holds `cluster` ("the refcount table", ...), or
  // null if none does.
  const char* NonL2MetadataAt(uint64_t cluster) const;
  Task<void> ResumeAfterLoad(IoRequest* request);
  Task<int> GrowL1(uint64_t min_entries);
  void SetL1(uint64_t l1_index, uint64_t value);
  bool TableBusy(uint64_t l1_index);
  void ClearTableBusy(uint64_t l1_index);
  void DropUnusedTables();

  // ---- engine_refcounts.cc: refcounts and cluster allocation.
  // *block: the cached refcount block for that refcount table entry, or null if the entry has
  // none.
  Task<int> AcquireBlock(uint64_t table_index, RefcountCache::Block** block);
  Task<int64_t> Allocate(uint64_t wanted, uint64_t* count, bool* fresh);
  Task<int64_t> AllocateAtEnd(uint64_t count);
  Task<int64_t> AllocateFirstFit(uint64_t count);
  Task<int> CreateRefblock(uint64_t table_index, uint64_t cluster);
  Task<int> GrowRefcountTable(uint64_t cluster);
  int EnsureFileSize(uint64_t end);
  void InitMetadataClusters();
  bool IsMetadataCluster(uint64_t cluster) const {
    return metadata_filter_[cluster & (kMetadataFilterBits - 1)] &&
           metadata_clusters_.count(cluster) != 0;
  }
  void AddMetadataClusters(uint64_t offset, uint64_t bytes);
  void RecordFree(uint64_t old_entry, bool discard);
  Task<int> FreeNow(uint64_t first_cluster, uint64_t count);
  // Drops one reference to `cluster`; *now is the refcount left.
  Task<int> ChangeRefcount(uint64_t cluster, bool free_metadata, uint64_t* now);
  Task<void> ApplyDecreases(uint64_t batch, std::vector<Decrease> decreases);
  void CheckGracePeriods();
  Task<int> WriteDirtyRefblocks();
  Task<int> WriteDirtyRefblocksLocked();

  // ---- engine_writeback.cc: writing caches back.
  Task<int> RunCycle();
  Task<int> Flush();
  Task<int> WritebackForSpace();
  Task<int> MarkDirtyBit();
  uint64_t IncompatibleOnDisk() const;
  Task<int> WriteHeaderField(uint32_t offset, const void* bytes, uint32_t length);
  Task<absl::Status> CloseTask();
  // Waits until the refcounts of every batch queued so far went down.
  Task<int> WaitDecreasesApplied();
  // The end of the last cluster with a refcount (UINT64_MAX if it cannot tell).
  Task<uint64_t> ImageEnd();
  // Cuts the file after the last cluster with a refcount, but not below `at_least`.
  Task<void> TrimFile(uint64_t at_least);
  // Whether a batch queued before sequence `end` still waits or is being applied.
  bool BatchesPending(uint64_t end) const;
  // Starts TrimAfterShrink once the batches a shrink queued are applied.
  void MaybeTrim();
  Task<void> TrimAfterShrink();

  // ---- engine_write.cc: writes that allocate.
  Task<int> WriteRange(uint64_t offset, uint64_t length, Source source, bool fua);
  Task<int> WriteInTable(uint32_t slab, uint64_t offset, uint64_t end, Source source,
                         uint64_t source_offset);
  // What a guest reads in [guest_offset, +length) of a cluster whose entry is `old_entry`.
  Task<int> CopyOnWriteRead(uint64_t guest_offset, uint64_t length, uint8_t* buffer,
                            uint64_t old_entry);
  Task<int64_t> SelfRead(uint64_t guest_offset, uint64_t length, uint8_t* buffer);
  bool InFlight(uint64_t first_cluster, uint64_t count) const;
  void MarkInFlight(uint64_t first_cluster, uint64_t count);
  void ClearInFlight(uint64_t first_cluster, uint64_t count);
  // Waits until one allocation in flight in the range is done.
  Task<void> WaitInFlight(uint64_t first_cluster, uint64_t count);
  void MetadataChanged();

  // ---- engine_discard.cc: discard and write-zeroes.
  Task<int> Discard(uint64_t offset, uint64_t length);
  Task<int> WriteZeroes(uint64_t offset, uint64_t length, bool may_unmap);
  Task<int> ChangeClusters(uint64_t start, uint64_t end, Change change);
  bool ReadsAsZero(uint64_t guest_offset, uint64_t entry) const;

  // ---- engine_resize.cc
  Task<absl::Status> ResizeTask(uint64_t new_size);
  Task<absl::Status> ShrinkTask(uint64_t new_size, uint64_t old_size);
  Task<int> ZeroPartialCluster(uint64_t offset, uint64_t length);
  AsyncMutex resize_mutex_{&scheduler_};

  ImageState* const image_;
  const Geometry g_;
  const Config config_;
  ImageHeader header_;  // the header as on disk (the engine updates it as it writes)
  std::vector<SnapshotInfo> snapshots_;
  uint64_t snapshot_table_bytes_ = 0;

  std::thread thread_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int timer_fd_ = -1;
  std::mutex mutex_;
  RequestList incoming_;
  std::vector<std::shared_ptr<Control>> controls_;
  std::vector<std::string> corruption_reports_;
  bool stop_ = false;
  bool corrupt_marked_ = false;
  // The thread does not end before the corrupt bit is on disk.
  bool writing_corrupt_bit_ = false;

  Scheduler scheduler_;
  std::unique_ptr<IoQueue> file_queue_;
  std::unique_ptr<ChildIo> io_;
  // Reads the image as a guest would, for copy-on-write; null for a read-only image.
  std::unique_ptr<Qcow2Queue> self_;
  uint32_t active_ = 0;  // coroutines serving requests or trimming the file
  WaitList idle_;        // woken when active_ drops to 0

  // L1 and L2.
  std::vector<uint64_t> l1_disk_;  // what the L1 table on disk holds
  std::set<uint64_t> l1_dirty_;    // entries whose new value waits for a writeback
  std::unordered_map<uint64_t, std::unique_ptr<WaitList>> busy_tables_;
  uint32_t clock_hand_ = 0;
  WaitList slab_released_;

  // Refcounts and allocation.
  std::vector<uint64_t> reftable_;
  RefcountCache refblocks_;
  std::unordered_map<uint64_t, std::unique_ptr<WaitList>> loading_blocks_;
  AsyncMutex alloc_mutex_;
  // Clusters that hold metadata (header, tables, refcount blocks): a refcount of 0 on one of them
  // is corruption, and the allocator must never hand it out.
  std::unordered_set<uint64_t> metadata_clusters_;
  // A cluster whose bit (by its low bits) is clear holds no metadata, which spares a table load
  // most set lookups. Bits are never cleared: a stale one only costs the lookup.
  static constexpr uint64_t kMetadataFilterBits = uint64_t{1} << 16;
  std::bitset<kMetadataFilterBits> metadata_filter_;
  uint64_t free_hint_ = 0;  // no free cluster below it
  uint64_t zero_from_ = 0;  // clusters from here on were never written (they read as zeroes)
  uint64_t file_size_at_open_ = 0;
  bool file_grown_ = false;
  std::vector<Decrease> decreases_;  // not durable yet
  std::deque<std::unique_ptr<GraceBatch>> grace_batches_;
  uint64_t next_batch_ = 0;
  std::set<uint64_t> applying_;  // batches past their grace period, refcounts going down
  // Set by a shrink: the file is trimmed once the batches before this sequence are applied.
  std::optional<uint64_t> trim_after_;
  WaitList decreases_applied_;

  // Writeback.
  AsyncMutex writeback_mutex_;
  bool data_since_sync_ = false;  // data written by the engine since the last flush
  uint64_t change_count_ = 0;     // metadata changes so far
  // Atomic for image_dirty(); written by the engine thread only.
  std::atomic<bool> dirty_bit_on_disk_{false};

  // Writes that allocate: guest clusters with an allocation under way.
  std::unordered_map<uint64_t, std::unique_ptr<WaitList>> in_flight_;
};

}  // namespace bexd::block::qcow2
