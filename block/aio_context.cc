// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/aio_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "util/eventfd.h"

namespace bexd::block {
namespace {

// Contexts whose thread and queues are gone, empty, for the next thread.
struct Pool {
  std::mutex mutex;
  std::vector<AioContext*> idle;
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
  this_thread = std::shared_ptr<AioContext>(context, [](AioContext* idle) {
    // Every queue waited for its requests before letting go, so the ring is empty.
    idle->room_waiters_.clear();
    Pool& pool = ThePool();
    std::lock_guard lock(pool.mutex);
    pool.idle.push_back(idle);
  });
  return this_thread;
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
