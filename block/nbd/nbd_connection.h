// SPDX-License-Identifier: GPL-2.0-or-later
// One connection to the NBD server, driven by one thread through libnbd's asynchronous API: a
// queue thread's own connection (the server allows multi-conn) or the node's one shared
// connection, driven by its connection thread. Requests become NBD commands whose completion
// callbacks only note the result; Process() runs libnbd's state machine on socket readiness and
// finishes requests outside libnbd.
//
// When the server goes away, in-flight and new requests wait (held) for up to reconnect-delay
// seconds while the node's NbdConnector connects again; a new connection re-sends them. Once the
// delay is over they fail with EIO, and so does every new request until the server is back. A
// server that answers NBD_ESHUTDOWN (it is shutting down, and waits for its clients to leave) is
// treated as going away: its commands are held, and once none is left in flight the connection
// is closed with NBD_CMD_DISC and a new one is made. The node's other connections are cut at once
// (their sockets shut down), since an idle one would otherwise keep the server waiting.
#pragma once

#include <absl/status/statusor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "block/io_request.h"
#include "block/nbd/nbd_block_lock.h"
#include "block/nbd/nbd_connector.h"
#include "block/nbd/nbd_handle.h"
#include "block/nbd/nbd_request.h"
#include "block/request_list.h"
#include "block/request_stack.h"

namespace bexd::block {

// What every connection of one node shares; owned by the node, which outlives its connections.
struct NbdNodeLink {
  std::string node_name;
  NbdOptions options;
  NbdServerInfo opened;  // what the server offered when the node was opened
  NbdConnector* connector = nullptr;
  // A server that can flush may keep acknowledged writes in volatile memory until a flush: writes
  // it acknowledged without FUA, and how many of those the last successful flush covered. A
  // connection lost while some were not covered may have taken them with it (the server may have
  // crashed), so the next flush to complete fails with EIO instead of reporting them durable.
  // Counted across the node's connections, since a flush on one covers writes on every one; so a
  // connection that finds its socket lost also checks the others' (an idle one learns of its own
  // loss only with its next request), and so does a flush before it reports success.
  mutable std::atomic<uint64_t> writes_acknowledged{0};
  mutable std::atomic<uint64_t> writes_flushed{0};
  mutable std::atomic<bool> writes_maybe_lost{false};
  mutable NbdBlockLock block_lock;  // blocks under read-modify-write, on any connection
};

class NbdConnection final : public NbdReconnectClient {
 public:
  // Receives each finished request with its result (bytes, 0, or -errno); called from Process(),
  // never from inside libnbd, so it may start requests again.
  using FinishFn = void (*)(void* context, IoRequest* request, int64_t result);

  static absl::StatusOr<std::unique_ptr<NbdConnection>> Create(const NbdNodeLink& link,
                                                               NbdHandle handle, FinishFn finish,
                                                               void* context);
  // Closes the connection: commands still in it and requests held for a reconnection are
  // dropped without their callbacks (libnbd no longer touches their buffers).
  ~NbdConnection();
  NbdConnection(const NbdConnection&) = delete;
  NbdConnection& operator=(const NbdConnection&) = delete;

  // Readable (an epoll set of the socket, the reconnect hand-over and the delay timer) when
  // Process() has something to do. The same descriptor across reconnections.
  int wait_fd() const { return epoll_fd_; }

  // Sends the request's commands, holds it for a reconnection, or fails it; never finishes it
  // here (a failure is reported by the next Process()).
  void Start(IoRequest* request);
  // Finishes `request` with `result` in the next Process(), without I/O.
  void FinishLater(IoRequest* request, int64_t result);
  // Runs what wait_fd() reports, without blocking, and finishes what is done; repeats until the
  // requests that FinishFn started are under way or finished.
  void Process();
  // Requests started and not yet finished.
  uint32_t in_flight() const { return in_flight_; }

  // Hands back a request that waited in the node's NbdBlockLock and now holds its blocks; any
  // thread. It goes on in the next Process().
  void Resume(IoRequest* request);

  void Reconnected(NbdHandle handle) override;
  void ServerStopping() override;
  void AttemptFailed() override;
  bool HoldsWritesOnLostSocket(uint64_t flushed) override;

 private:
  enum class State {
    kConnected,
    kWaiting,  // lost; holding requests until reconnected or the delay is over
    kFailing,  // lost and the delay is over: requests fail with EIO
  };

  NbdConnection(const NbdNodeLink& link, FinishFn finish, void* context)
      : link_(link), finish_(finish), context_(context) {}
  absl::Status SetUp(NbdHandle handle);
  // Takes `handle` as the live connection and watches its socket.
  absl::Status Adopt(NbdHandle handle);

  // Issues, holds or fails the request, as the connection's state says.
  void Route(IoRequest* request);
  void Issue(IoRequest* request);
  // Reads or writes `length` bytes at `offset` from the request's iovec, `position` bytes in.
  void IssueData(IoRequest* request, uint64_t position, uint64_t offset, uint64_t length,
                 uint32_t flags);
  void IssueRanges(IoRequest* request, uint64_t offset, uint64_t end, uint32_t flags);
  // Zeroes [offset, end): WRITE_ZEROES where the server has it, written zeroes otherwise.
  void IssueZeroes(IoRequest* request, uint64_t offset, uint64_t end);
  void IssueZeroWrites(IoRequest* request, uint64_t offset, uint64_t end);
  // `length` bytes at `offset` from or into `data`, in commands of at most the server's payload
  // limit (a multiple of its minimum block size); stops at the first refused command.
  void SendData(IoRequest* request, uint64_t offset, uint64_t length, char* data, bool write,
                uint32_t flags);

  // Requests not aligned to the server's minimum block size, or whose memory pieces are not
  // (nbd_unaligned.cc), which libnbd refuses as they are: they go through a bounce buffer, and
  // writes that cover blocks only partly as read-modify-write under the node's NbdBlockLock.
  bool Unaligned(const IoRequest& request) const;
  // Sends the commands of the request's current phase; false if it waits for the block lock.
  bool IssueUnaligned(IoRequest* request);
  // A phase's commands are done without error: starts the next phase (true) or, after the last,
  // copies a read out (false: the request is done).
  bool AdvanceUnaligned(IoRequest* request);
  // The request is finished: releases its blocks and its bounce buffer.
  void EndUnaligned(IoRequest* request);
  // Where the block at `offset` is in the request's bounce buffer.
  char* Bounced(IoRequest* request, uint64_t offset);
  char* TakeBounce(uint64_t size);
  // 1 where the server sets no minimum block size.
  uint32_t MinBlock() const { return info_.min_block > 1 ? info_.min_block : 1; }
  // Sends one NBD command (`command` calls nbd_aio_*), counting it in the request's state, or
  // notes why libnbd refused it.
  template <typename Command>
  void Send(IoRequest* request, Command command);
  void IssueFlushAfterWrite(IoRequest* request);
  void Finish(IoRequest* request, int64_t result);
  int64_t Outcome(IoRequest* request) const;
  // Counts a write the server acknowledged, or notes what a flush made durable; a flush after a
  // lost connection that may have taken acknowledged writes fails with EIO.
  int64_t Acknowledge(IoRequest* request, int64_t result);

  // libnbd's callbacks; user_data is the request.
  static int OnCommandDone(void* user_data, int* error);
  static int OnExtent(void* user_data, const char* context, uint64_t offset, uint32_t* entries,
                      size_t count, int* error);

  // Runs what the epoll set reports; false if it reported nothing.
  bool HandleEvents();
  // Whether libnbd has commands the server has not answered yet, whose replies may be unread.
  bool AwaitsReplies() const;
  void Settle();  // sorts commands' completions and notices a lost connection
  // Keeps libnbd's message for the failure that killed the connection, for the log.
  void NoteLostReason();
  void LoseConnection();
  // After NBD_ESHUTDOWN: tells the node's other connections, and disconnects once the server has
  // answered every command in flight.
  void DisconnectFromStoppingServer();
  // Whether another connection of the node holds unflushed writes on a socket the server closed.
  bool OthersHoldLostWrites(uint64_t flushed);
  void DelayOver();
  void Install(NbdHandle handle);
  void WatchSocket();

  const NbdNodeLink& link_;
  const FinishFn finish_;
  void* const context_;

  NbdHandle handle_;  // null while lost
  NbdServerInfo info_;
  uint32_t max_payload_ = 0;
  State state_ = State::kConnected;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;   // eventfd: the connector delivered a handle
  int timer_fd_ = -1;  // the end of reconnect-delay
  int socket_fd_ = -1;
  uint32_t socket_events_ = 0;
  std::atomic<nbd_handle*> delivered_{nullptr};
  // The node's writes_acknowledged count of the last write acknowledged on this connection; other
  // connections read it (HoldsWritesOnLostSocket).
  std::atomic<uint64_t> last_acknowledged_{0};
  std::atomic<bool> attempt_failed_{false};  // AttemptFailed() since the last wake-up
  // With reconnect-delay=0: requests are held only until the first reconnect attempt ends.
  bool first_attempt_only_ = false;
  std::string lost_reason_;
  // A command was answered with NBD_ESHUTDOWN: new requests wait for the next connection, the
  // node's other connections are still to be told, NBD_CMD_DISC was sent.
  bool server_stopping_ = false;
  bool announce_stopping_ = false;
  bool disconnect_sent_ = false;
  // ServerStopping() shut the socket down from another thread; socket_fd_ changes under the lock.
  std::atomic<bool> cut_by_other_{false};
  std::mutex socket_mutex_;

  RequestStack resumed_;  // granted their blocks by NbdBlockLock, from any thread
  // Bounce buffers of unaligned requests, kept for reuse: allocated only when none that is free
  // is large enough.
  struct Bounce {
    std::unique_ptr<char[]> data;
    uint64_t size = 0;
    bool taken = false;
  };
  std::vector<Bounce> bounces_;

  RequestList completed_;  // every command done (callbacks ran), to be sorted by Settle()
  RequestList held_;       // waiting for a reconnection
  RequestList finished_;   // results final, for FinishFn
  uint32_t in_flight_ = 0;
};

}  // namespace bexd::block
