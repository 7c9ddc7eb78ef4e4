// SPDX-License-Identifier: GPL-2.0-or-later
// What a transport supplies to the queue-thread skeleton (queue_thread.h): where requests come
// from and where replies go. Everything else a queue thread does (pinning, the IoQueue and the
// request core, request slots, waiting, draining, stats) is the skeleton's.
//
// /dev/fuse reads a clone descriptor and writes replies back to it (export/fuse_dev/); a
// vhost-user-fs virtqueue pops descriptor chains and pushes used entries
// (export/vhost_user/); FUSE over io_uring fetches requests as CQEs of ring entries and commits
// replies from them (export/fuse_uring/).
#pragma once

#include <absl/status/status.h>

#include <cstdint>

namespace bexd::exports {

class QueueThread;

class QueueTransport {
 public:
  enum class Fetched {
    kMore,   // requests may still wait: fetch again before sleeping
    kEmpty,  // the source is empty (or stopped): sleep until OnEvent() or a completion
  };

  virtual ~QueueTransport() = default;

  // On the queue thread as a run begins: watch the transport's fds in thread.loop() (with tags
  // other than QueueThread::kIoTag) and point every slot's request at its buffers
  // (thread.request(i) for i < thread.slot_count()). A failure ends the run before it starts
  // and is what QueueThread::BeginRun() returns.
  virtual absl::Status Attach(QueueThread& thread) = 0;

  // On the queue thread: takes waiting requests while thread.has_free_slot(), each into the slot
  // thread.next_slot() names and handed to the core with thread.DispatchNext(). `idle`: no
  // request is in flight. Must not sleep unless the transport says so (BlocksWhenIdle()).
  virtual Fetched Fetch(QueueThread& thread, bool idle) = 0;

  // On the queue thread: the core finished the request in `slot`; `result` is as for
  // fuse::CompletionFn (> 0: reply bytes in the request's `out`, 0: no reply, < 0: not a FUSE
  // request). The skeleton frees the slot when this returns.
  virtual void Reply(uint32_t slot, int64_t result) = 0;

  // On the queue thread after each batch of completions: publish replies held back (a used
  // ring's index and the guest notification). Nothing for a transport that sends each reply.
  virtual void Flush() {}

  // On the queue thread, before it sleeps in epoll while taking requests: re-arm the
  // notification of new requests. False if requests arrived meanwhile (fetch instead of
  // sleeping). Nothing for a transport whose fds need no re-arming.
  virtual bool PrepareToSleep(QueueThread& thread) { return true; }

  // On the queue thread, while it spins before sleeping (QueueThreadOptions::poll_max_ns): true if
  // Fetch() would find a request, judged from memory only (no system call). Requests must not
  // need a notification meanwhile: a transport that polls keeps them off until PrepareToSleep().
  virtual bool RequestsWaiting() const { return false; }

  // On the queue thread: a fd the transport watches is ready.
  virtual void OnEvent(uint64_t tag, uint32_t events) {}

  // True if Fetch() with `idle` waits in the kernel for the next request itself (a blocking read
  // of /dev/fuse) instead of letting the thread sleep in epoll. A stop ends that wait with a
  // signal (thread_interrupt.h), so the wait must return on EINTR.
  virtual bool BlocksWhenIdle() const { return false; }

  // On the queue thread once the run has drained (no request in flight). `failed`: the transport
  // ended the run itself (QueueThread::EndServing(true)) rather than a stop request.
  virtual void Detach(bool failed) {}
};

}  // namespace bexd::exports
