// One queue of a FUSE export: a /dev/fuse descriptor and the thread that serves it. The thread
// owns everything its requests touch (request slots and their buffers, the core's fuse::Queue and
// through it the block IoQueue), so serving takes no lock and allocates nothing.
//
// An idle thread (no request in flight) waits in a blocking read of its descriptor; a busy one
// reads without blocking and waits in epoll for the device and its IoQueue together.
#pragma once

#include <absl/status/statusor.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "export/event_loop.h"
#include "export/fuse_slot_buffers.h"
#include "fuse/queue.h"
#include "fuse/queue_stats.h"
#include "fuse/request.h"
#include "fuse/session.h"
#include "util/unique_fd.h"

namespace bexd::exp {

class FuseQueueThread {
 public:
  // Request slots per queue: the kernel's background limit (64, set in the core's INIT reply)
  // plus room for synchronous requests. When every slot is busy the thread stops reading and the
  // kernel's shared input queue feeds the other queues.
  static constexpr uint32_t kSlots = 80;

  // Called once on the queue thread as it ends: failed is true if it ended on its own (the FUSE
  // connection went away, or the kernel sent bytes that are not a FUSE request) rather than
  // because RequestStop() asked it to.
  using ExitFn = std::function<void(uint32_t index, bool failed)>;

  // `cpu` >= 0 pins the thread to that CPU before it serves; -1 leaves it to the scheduler.
  static absl::StatusOr<std::unique_ptr<FuseQueueThread>> Create(
      uint32_t index, std::string export_id, std::shared_ptr<fuse::Session> session,
      util::UniqueFd device, int cpu = -1);
  FuseQueueThread(const FuseQueueThread&) = delete;
  FuseQueueThread& operator=(const FuseQueueThread&) = delete;
  ~FuseQueueThread();  // stops and joins the thread

  // Starts the thread; returns once it serves, or with the reason it could not start.
  absl::Status Start(ExitFn on_exit);
  // Stop taking requests; the thread answers those it holds and ends. Safe from any thread,
  // including queue threads.
  void RequestStop();
  // Waits for the thread to end; after RequestStop(), also wakes it from a blocking read. Only
  // from a thread that is not a queue thread of this export.
  void Join();
  // Closes the /dev/fuse descriptor. Only once the thread has ended.
  void CloseDevice() { device_.Reset(); }
  // A copy of the core's counters; valid once Start() succeeded, also after the thread ended.
  fuse::QueueStatsSnapshot Stats() const;

 private:
  struct Slot {
    fuse::Request request;
    struct iovec in;
    struct iovec out;
    uint32_t index;
  };
  enum class ReadResult { kTaken, kRetry, kEmpty, kEnded };
  static constexpr uint64_t kDeviceTag = 0;
  static constexpr uint64_t kIoTag = 1;

  FuseQueueThread(uint32_t index, std::string export_id, std::shared_ptr<fuse::Session> session,
                  util::UniqueFd device, int cpu, std::unique_ptr<EventLoop> loop,
                  FuseSlotBuffers buffers);

  void Run(std::promise<absl::Status>* started, std::promise<void> ended);
  absl::Status SetUp();
  void Serve();
  ReadResult ReadRequest(bool wait);
  bool SetDeviceBlocking(bool blocking);
  void InterruptIfRunning();
  // Prefixes `status`'s message with the export and queue it concerns.
  absl::Status Annotate(const absl::Status& status) const;
  static void OnReply(fuse::Request* request, int64_t result, void* context);
  void SendReply(const Slot& slot, size_t bytes);
  void EndServing(bool failed);

  const uint32_t index_;
  const int cpu_;  // -1: not pinned
  const std::string export_id_;
  const std::shared_ptr<fuse::Session> session_;
  util::UniqueFd device_;
  int device_flags_ = 0;  // its file status flags, without O_NONBLOCK
  bool device_blocking_ = false;
  std::unique_ptr<EventLoop> loop_;
  FuseSlotBuffers buffers_;
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<uint32_t[]> free_;  // a stack of free slot indexes
  uint32_t free_count_ = 0;
  bool accepting_ = true;  // false once draining: no more reads from the device
  bool failed_ = false;
  std::unique_ptr<fuse::Queue> queue_;
  ExitFn on_exit_;
  std::thread thread_;
  std::future<void> ended_;  // ready once the thread does nothing more but return
  // Guards signalling the thread against joining it: a joined thread's handle is gone.
  std::mutex signal_mutex_;
  bool signallable_ = false;
};

}  // namespace bexd::exp
