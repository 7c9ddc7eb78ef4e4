// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/aio_context.h"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <system_error>
#include <thread>

#include "util/eventfd.h"

namespace bexd::block {
namespace {

// Contexts whose thread and queues are gone, empty: up to kPoolSize wait for the next thread,
// the rest go to a thread that destroys them.
struct Pool {
  std::mutex mutex;
  std::vector<AioContext*> idle;
  std::vector<AioContext*> surplus;
  bool destroying = false;
};

Pool& ThePool() {
  // Never destroyed: a thread may return its context while the process exits.
  static Pool* pool = new Pool;
  return *pool;
}

}  // namespace

absl::StatusOr<std::shared_ptr<AioContext>> AioContext::ForThisThread() {
  // The thread's own reference keeps its context for the thread's life, so a thread that makes
  // and drops queues (the main thread reading image headers) reuses one context.
  thread_local std::shared_ptr<AioContext> this_thread;
  if (this_thread != nullptr) return this_thread;
  AioContext* context = nullptr;
  {
    Pool& pool = ThePool();
    std::lock_guard lock(pool.mutex);
    if (!pool.idle.empty()) {
      context = pool.idle.back();
      pool.idle.pop_back();
    }
  }
  if (context == nullptr) {
    io_context_t handle = nullptr;
    int error = io_setup(kDepth, &handle);
    if (error != 0) {
      return absl::ErrnoToStatus(-error,
                                 fmt::format("cannot create a libaio context for {} requests (see "
                                             "/proc/sys/fs/aio-max-nr)",
                                             kDepth));
    }
    context = new AioContext(handle);
  }
  this_thread = std::shared_ptr<AioContext>(context, &AioContext::Release);
  return this_thread;
}

AioContext::~AioContext() { io_destroy(handle_); }

void AioContext::Release(AioContext* context) {
  // Every queue waited for its requests before letting go, so the ring is empty.
  context->room_waiters_.clear();
  Pool& pool = ThePool();
  std::unique_lock lock(pool.mutex);
  if (pool.idle.size() < kPoolSize) {
    pool.idle.push_back(context);
    return;
  }
  // Kept, the contexts of a long chain's threads would hold their share of the host's
  // fs.aio-max-nr until the daemon exits, and other processes' io_setup would fail. io_destroy
  // waits for an RCU grace period (~30 ms), too long for the thread deleting the node.
  pool.surplus.push_back(context);
  if (pool.destroying) return;
  pool.destroying = true;
  lock.unlock();
  try {
    std::thread(&AioContext::DestroySurplus).detach();
  } catch (const std::system_error&) {
    DestroySurplus();  // no thread to spare: the caller waits instead
  }
}

void AioContext::DestroySurplus() {
  pthread_setname_np(pthread_self(), "bexd-aio-free");
  Pool& pool = ThePool();
  std::unique_lock lock(pool.mutex);
  while (!pool.surplus.empty()) {
    AioContext* context = pool.surplus.back();
    pool.surplus.pop_back();
    lock.unlock();
    delete context;
    lock.lock();
  }
  pool.destroying = false;
}

int AioContext::Take(struct io_event* events, int capacity) {
  int count = events_.Take(events, capacity);
  if (count <= 0) return count;
  in_kernel_ -= static_cast<uint32_t>(count);
  for (int fd : room_waiters_) util::SignalEventFd(fd);
  room_waiters_.clear();
  return count;
}

void AioContext::WaitForRoom(int event_fd) {
  if (std::find(room_waiters_.begin(), room_waiters_.end(), event_fd) == room_waiters_.end()) {
    room_waiters_.push_back(event_fd);
  }
}

void AioContext::ForgetRoomWaiter(int event_fd) { std::erase(room_waiters_, event_fd); }

}  // namespace bexd::block
