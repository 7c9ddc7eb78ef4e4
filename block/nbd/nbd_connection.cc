// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/nbd/nbd_connection.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "block/nbd/nbd_api.h"
#include "block/zero_buffer.h"
#include "util/align.h"
#include "util/eventfd.h"
#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::block {
namespace {

using util::AlignDown;
using util::AlignUp;

enum Tag : uint32_t { kSocketTag, kWakeTag, kTimerTag };

// NBD's fields are 32 bits wide; libnbd allows 64 MiB per read or write.
constexpr uint64_t kMaxRangeCommand = uint64_t{1} << 30;  // trim, write-zeroes, block status
constexpr uint32_t kMaxDataCommand = uint32_t{32} << 20;  // QEMU's NBD_MAX_BUFFER_SIZE
// With reconnect-delay=0, how long requests wait at most for the first reconnect attempt.
constexpr uint32_t kFirstAttemptWaitSeconds = 1;

NbdRequestState* StateOf(IoRequest* request) { return DriverState<NbdRequestState>(request); }

// Every command's completion callback points at its request.
nbd_completion_callback Completion(IoRequest* request, int (*callback)(void*, int*)) {
  return nbd_completion_callback{.callback = callback, .user_data = request, .free = nullptr};
}

void Drain(int fd) {
  uint64_t value;
  [[maybe_unused]] ssize_t n = read(fd, &value, sizeof(value));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NbdConnection>> NbdConnection::Create(const NbdNodeLink& link,
                                                                     NbdHandle handle,
                                                                     FinishFn finish,
                                                                     void* context) {
  std::unique_ptr<NbdConnection> connection(new NbdConnection(link, finish, context));
  absl::Status status = connection->SetUp(std::move(handle));
  if (!status.ok()) {
    return absl::Status(
        status.code(), fmt::format("node '{}': {}", link.node_name, std::string(status.message())));
  }
  return connection;
}

absl::Status NbdConnection::SetUp(NbdHandle handle) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0 || timer_fd_ < 0) {
    return absl::ErrnoToStatus(errno, "cannot create the NBD connection's descriptors");
  }
  for (auto [fd, tag] : {std::pair{wake_fd_, kWakeTag}, std::pair{timer_fd_, kTimerTag}}) {
    struct epoll_event event = {.events = EPOLLIN, .data = {.u32 = tag}};
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      return absl::ErrnoToStatus(errno, "cannot watch the NBD connection's descriptors");
    }
  }
  absl::Status status = Adopt(std::move(handle));
  if (status.ok() && link_.connector != nullptr) link_.connector->Register(this);
  return status;
}

absl::Status NbdConnection::Adopt(NbdHandle handle) {
  const int fd = Nbd().nbd_aio_get_fd(handle.get());
  struct epoll_event event = {.events = EPOLLIN, .data = {.u32 = kSocketTag}};
  if (fd < 0 || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
    return absl::ErrnoToStatus(errno, "cannot watch the NBD socket");
  }
  handle_ = std::move(handle);
  info_ = ReadServerInfo(handle_.get());
  max_payload_ =
      info_.max_payload == 0 ? kMaxDataCommand : std::min(info_.max_payload, kMaxDataCommand);
  {
    std::lock_guard lock(socket_mutex_);
    socket_fd_ = fd;
  }
  socket_events_ = EPOLLIN;
  return absl::OkStatus();
}

NbdConnection::~NbdConnection() {
  if (link_.connector != nullptr) link_.connector->Withdraw(this);
  link_.block_lock.Withdraw(this);
  Nbd().nbd_close(delivered_.exchange(nullptr));
  handle_.reset();
  for (int fd : {epoll_fd_, wake_fd_, timer_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void NbdConnection::Start(IoRequest* request) {
  ++in_flight_;
  Route(request);
}

void NbdConnection::Route(IoRequest* request) {
  switch (state_) {
    case State::kConnected:
      if (server_stopping_) {
        held_.PushBack(request);
      } else {
        Issue(request);
      }
      break;
    case State::kWaiting:
      held_.PushBack(request);
      break;
    case State::kFailing:
      Finish(request, -EIO);
      break;
  }
}

void NbdConnection::FinishLater(IoRequest* request, int64_t result) {
  ++in_flight_;
  Finish(request, result);
}

void NbdConnection::Finish(IoRequest* request, int64_t result) {
  StateOf(request)->result = result;
  finished_.PushBack(request);
}

// Every command of the request holds one count in `commands`, and so does this function while it
// issues them: a command that completes at once (libnbd fails them all when the connection dies
// under a send) cannot hand the request on before the last one is issued.
void NbdConnection::Issue(IoRequest* request) {
  NbdRequestState* state = StateOf(request);
  state->connection = this;
  state->commands = 1;
  state->error = 0;
  state->lost = false;
  state->flush_after = false;
  state->extent_seen = false;
  nbd_handle* handle = handle_.get();
  const uint64_t size = info_.size;
  const bool unmap = link_.options.discard == DiscardMode::kUnmap;
  switch (request->op) {
    case IoOp::kRead:
      if (Unaligned(*request)) {
        IssueUnaligned(request);
      } else {
        IssueData(request, 0, request->offset, request->length, 0);
      }
      break;
    case IoOp::kWrite: {
      uint32_t flags = 0;
      if (request->flags & kIoFua) {
        // Without FUA, a flush after the write makes it durable (a server that cannot flush
        // writes through).
        if (info_.can_fua) {
          flags = LIBNBD_CMD_FLAG_FUA;
        } else {
          state->flush_after = info_.can_flush;
        }
      }
      if (Unaligned(*request)) {
        state->write_flags = flags;
        if (!IssueUnaligned(request)) return;  // waits for its blocks
      } else {
        IssueData(request, 0, request->offset, request->length, flags);
      }
      break;
    }
    case IoOp::kFlush:
      if (info_.can_flush) {
        state->flush_covers = link_.writes_acknowledged.load(std::memory_order_acquire);
        Send(request,
             [&] { return Nbd().nbd_aio_flush(handle, Completion(request, &OnCommandDone), 0); });
      }
      break;
    case IoOp::kDiscard:
      // A hint the server may not take, and with discard=ignore (QEMU's default) none is sent.
      // Blocks only partly covered are left alone, as QEMU does.
      if (info_.can_trim && unmap) {
        IssueRanges(request, AlignUp(request->offset, MinBlock()),
                    AlignDown(request->offset + request->length, MinBlock()), 0);
      }
      break;
    case IoOp::kWriteZeroes:
      state->zero_flags =
          (request->flags & kIoMayUnmap) && unmap ? 0 : uint32_t{LIBNBD_CMD_FLAG_NO_HOLE};
      if (Unaligned(*request)) {
        state->write_flags = 0;
        if (!IssueUnaligned(request)) return;  // waits for its blocks
      } else {
        IssueZeroes(request, request->offset, request->offset + request->length);
      }
      break;
    case IoOp::kBlockStatus: {
      if (request->offset >= size) break;
      if (!info_.block_status) break;  // all data (Outcome)
      // From the start of the block holding the offset: the server describes whole blocks.
      const uint64_t start = AlignDown(request->offset, MinBlock());
      Send(request, [&] {
        return Nbd().nbd_aio_block_status(
            handle,
            std::min({AlignUp(request->offset + request->length, MinBlock()) - start, size - start,
                      kMaxRangeCommand}),
            start,
            nbd_extent_callback{.callback = &OnExtent, .user_data = request, .free = nullptr},
            Completion(request, &OnCommandDone), LIBNBD_CMD_FLAG_REQ_ONE);
      });
      break;
    }
    case IoOp::kAllocate:
      // NBD cannot reserve space on the server (QEMU's FUSE export answers the same).
      state->error = EOPNOTSUPP;
      break;
    default:
      state->error = EINVAL;
      break;
  }
  if (--state->commands == 0) completed_.PushBack(request);
}

void NbdConnection::IssueData(IoRequest* request, uint64_t position, uint64_t offset,
                              uint64_t length, uint32_t flags) {
  NbdRequestState* state = StateOf(request);
  for (int i = 0; i < request->iovcnt && length > 0; ++i) {
    if (position >= request->iov[i].iov_len) {
      position -= request->iov[i].iov_len;
      continue;
    }
    char* data = static_cast<char*>(request->iov[i].iov_base) + position;
    const uint64_t piece = std::min<uint64_t>(request->iov[i].iov_len - position, length);
    SendData(request, offset, piece, data, request->op != IoOp::kRead, flags);
    if (state->lost || state->error != 0) return;
    position = 0;
    offset += piece;
    length -= piece;
  }
}

void NbdConnection::IssueRanges(IoRequest* request, uint64_t start, uint64_t end, uint32_t flags) {
  NbdRequestState* state = StateOf(request);
  nbd_handle* handle = handle_.get();
  for (uint64_t offset = start; offset < end; offset += kMaxRangeCommand) {
    const uint64_t length = std::min(end - offset, kMaxRangeCommand);
    Send(request, [&] {
      return request->op == IoOp::kDiscard
                 ? Nbd().nbd_aio_trim(handle, length, offset, Completion(request, &OnCommandDone),
                                      0)
                 : Nbd().nbd_aio_zero(handle, length, offset, Completion(request, &OnCommandDone),
                                      flags);
    });
    if (state->lost || state->error != 0) return;
  }
}

void NbdConnection::IssueZeroes(IoRequest* request, uint64_t start, uint64_t end) {
  if (info_.can_zero) {
    IssueRanges(request, start, end, StateOf(request)->zero_flags);
  } else {
    IssueZeroWrites(request, start, end);
  }
}

// For a server without WRITE_ZEROES: writes from the static zero buffer, as QEMU's block layer
// falls back to.
void NbdConnection::IssueZeroWrites(IoRequest* request, uint64_t start, uint64_t end) {
  NbdRequestState* state = StateOf(request);
  nbd_handle* handle = handle_.get();
  const uint64_t chunk_limit = std::min<uint64_t>(kZeroBufferSize, max_payload_);
  for (uint64_t offset = start; offset < end; offset += chunk_limit) {
    const uint64_t length = std::min(end - offset, chunk_limit);
    Send(request, [&] {
      return Nbd().nbd_aio_pwrite(handle, ZeroBuffer(), length, offset,
                                  Completion(request, &OnCommandDone), 0);
    });
    if (state->lost || state->error != 0) return;
  }
}

template <typename Command>
void NbdConnection::Send(IoRequest* request, Command command) {
  NbdRequestState* state = StateOf(request);
  // Counted first: libnbd may run the completion callback inside the call (when the connection
  // dies under the send, it fails every command at once).
  ++state->commands;
  if (command() >= 0) {
    // Queued even if the send found the connection dead; libnbd's error then says why.
    if (lost_reason_.empty() && NbdHandleEnded(handle_.get())) NoteLostReason();
    return;
  }
  // Refused before it was queued, so its callback never runs.
  --state->commands;
  if (NbdHandleEnded(handle_.get())) {
    state->lost = true;
  } else if (state->error == 0) {
    const int error = Nbd().nbd_get_errno();
    state->error = error != 0 ? error : EIO;
    static log::RateLimit refused;
    log::Limited(refused, log::Level::kWarn, "node '{}': libnbd refused a request: {}",
                 link_.node_name,
                 Nbd().nbd_get_error() != nullptr ? Nbd().nbd_get_error() : "no reason");
  }
}

void NbdConnection::SendData(IoRequest* request, uint64_t offset, uint64_t length, char* data,
                             bool write, uint32_t flags) {
  NbdRequestState* state = StateOf(request);
  nbd_handle* handle = handle_.get();
  while (length > 0 && !state->lost && state->error == 0) {
    const uint64_t piece = std::min<uint64_t>(length, max_payload_);
    Send(request, [&] {
      return write ? Nbd().nbd_aio_pwrite(handle, data, piece, offset,
                                          Completion(request, &OnCommandDone), flags)
                   : Nbd().nbd_aio_pread(handle, data, piece, offset,
                                         Completion(request, &OnCommandDone), 0);
    });
    data += piece;
    offset += piece;
    length -= piece;
  }
}

void NbdConnection::IssueFlushAfterWrite(IoRequest* request) {
  NbdRequestState* state = StateOf(request);
  state->flush_after = false;
  state->commands = 1;
  Send(request,
       [&] { return Nbd().nbd_aio_flush(handle_.get(), Completion(request, &OnCommandDone), 0); });
  if (--state->commands == 0) completed_.PushBack(request);
}

int NbdConnection::OnCommandDone(void* user_data, int* error) {
  auto* request = static_cast<IoRequest*>(user_data);
  NbdRequestState* state = StateOf(request);
  if (*error == ENOTCONN) {
    state->lost = true;  // libnbd's error for commands cut off by a lost connection
  } else if (*error == ESHUTDOWN) {
    // The server is going away and took none of it: the next connection sends it again.
    state->lost = true;
    if (!state->connection->server_stopping_) {
      state->connection->server_stopping_ = true;
      state->connection->announce_stopping_ = true;
    }
  } else if (*error != 0 && state->error == 0) {
    state->error = *error;
  }
  if (--state->commands == 0) state->connection->completed_.PushBack(request);
  return 1;  // retire the command
}

int NbdConnection::OnExtent(void* user_data, const char* context, uint64_t offset,
                            uint32_t* entries, size_t count, int* error) {
  NbdRequestState* state = StateOf(static_cast<IoRequest*>(user_data));
  if (state->extent_seen || count < 2 ||
      std::strcmp(context, LIBNBD_CONTEXT_BASE_ALLOCATION) != 0) {
    return 0;
  }
  state->extent_seen = true;
  state->extent_length = entries[0];
  state->extent_flags = entries[1];
  return 0;
}

int64_t NbdConnection::Outcome(IoRequest* request) const {
  const NbdRequestState* state = StateOf(request);
  if (state->error != 0) return -state->error;
  switch (request->op) {
    case IoOp::kFlush:
      return 0;
    case IoOp::kBlockStatus: {
      if (request->offset >= info_.size) return 0;
      const uint64_t length = std::min(request->length, info_.size - request->offset);
      if (!info_.block_status) {
        request->status_data = true;
        return static_cast<int64_t>(length);
      }
      // A server must describe at least one extent of a non-empty range, here from the start
      // of the block holding the offset.
      if (!state->extent_seen) return -EIO;
      uint64_t extent = state->extent_length;
      uint32_t flags = state->extent_flags;
      // Extents must be whole blocks, but some servers describe finer ones (a file plugin over
      // a file system of 1 KiB blocks): cut a longer one back to whole blocks, and call a shorter
      // one a whole block of data, which is always safe. Otherwise the next query would start
      // inside the block and find the same boundary again.
      const uint32_t block = MinBlock();
      if (extent % block != 0) {
        if (extent > block) {
          extent = AlignDown(extent, block);
        } else {
          extent = block;
          flags = 0;
        }
      }
      const uint64_t before = request->offset - AlignDown(request->offset, block);
      if (extent <= before) return -EIO;
      // A hole reads as zeroes only when the server says so too.
      const uint32_t hole = LIBNBD_STATE_HOLE | LIBNBD_STATE_ZERO;
      request->status_data = (flags & hole) != hole;
      return static_cast<int64_t>(std::min<uint64_t>(extent - before, length));
    }
    default:
      return static_cast<int64_t>(request->length);
  }
}

// Queue threads wait for wait_fd() edge-triggered, so nothing may be left ready in the epoll set
// when this returns: no new edge would come for it. libnbd reads one reply per notification and
// leaves the rest in the socket, so this runs until the set has nothing more to report, or until
// libnbd awaits no reply: then the socket holds nothing unread, and anything that arrives later
// is a new edge. That saves a queue-depth-1 request an epoll_wait.
void NbdConnection::Process() {
  bool handled = true;
  while (handled) {
    handled = HandleEvents();
    do {
      Settle();
      RequestList done;
      done.Splice(finished_);
      while (IoRequest* request = done.PopFront()) {
        --in_flight_;
        EndUnaligned(request);
        finish_(context_, request, StateOf(request)->result);
      }
      // FinishFn may have started requests that ended at once (refused, or the connection gone).
    } while (!finished_.empty() || !completed_.empty());
    WatchSocket();
    handled = handled && AwaitsReplies();
  }
}

bool NbdConnection::AwaitsReplies() const {
  return handle_ != nullptr && Nbd().nbd_aio_in_flight(handle_.get()) > 0;
}

bool NbdConnection::HandleEvents() {
  struct epoll_event events[3];
  const int count = epoll_wait(epoll_fd_, events, 3, 0);
  for (int i = 0; i < count; ++i) {
    const uint32_t ready = events[i].events;
    switch (events[i].data.u32) {
      case kSocketTag:
        if (handle_ == nullptr) break;
        if ((ready & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
            Nbd().nbd_aio_notify_read(handle_.get()) == -1) {
          NoteLostReason();
        }
        if ((ready & EPOLLOUT) && !NbdHandleEnded(handle_.get()) &&
            Nbd().nbd_aio_notify_write(handle_.get()) == -1) {
          NoteLostReason();
        }
        break;
      case kWakeTag: {
        Drain(wake_fd_);
        if (nbd_handle* handle = delivered_.exchange(nullptr)) Install(NbdHandle(handle));
        if (attempt_failed_.exchange(false) && first_attempt_only_) DelayOver();
        RequestList resumed;
        resumed_.TakeAll(&resumed);
        while (IoRequest* request = resumed.PopFront()) Route(request);
        break;
      }
      case kTimerTag:
        Drain(timer_fd_);
        DelayOver();
        break;
    }
  }
  return count > 0;
}

void NbdConnection::Settle() {
  if (handle_ != nullptr && NbdHandleEnded(handle_.get())) LoseConnection();
  while (IoRequest* request = completed_.PopFront()) {
    NbdRequestState* state = StateOf(request);
    const bool flush_lost = state->flush_after && state->error == 0 && state_ != State::kConnected;
    if (state->lost || flush_lost) {
      // Reads and writes are idempotent, so the whole request goes again on the next connection
      // (at once if one came before this was sorted).
      Route(request);
      continue;
    }
    if (state->phase != NbdUnalignedPhase::kNone && state->error == 0 &&
        AdvanceUnaligned(request)) {
      continue;
    }
    if (state->flush_after && state->error == 0) {
      IssueFlushAfterWrite(request);
      continue;
    }
    Finish(request, Acknowledge(request, Outcome(request)));
  }
  if (server_stopping_) DisconnectFromStoppingServer();
}

int64_t NbdConnection::Acknowledge(IoRequest* request, int64_t result) {
  if (!info_.can_flush || result < 0) return result;
  switch (request->op) {
    case IoOp::kWrite:
    case IoOp::kWriteZeroes:
      // A FUA write is durable already (with FUA, or with the flush sent after it).
      if (!(request->flags & kIoFua)) {
        last_acknowledged_.store(
            link_.writes_acknowledged.fetch_add(1, std::memory_order_acq_rel) + 1,
            std::memory_order_relaxed);
      }
      return result;
    case IoOp::kFlush: {
      uint64_t flushed = link_.writes_flushed.load(std::memory_order_acquire);
      const bool flagged = link_.writes_maybe_lost.exchange(false, std::memory_order_acq_rel);
      const bool lost = OthersHoldLostWrites(flushed) || flagged;
      // Reported once: what this flush was sent for counts as flushed either way, so that a
      // connection that notices its loss later does not report the same writes again.
      const uint64_t covers = StateOf(request)->flush_covers;
      while (flushed < covers && !link_.writes_flushed.compare_exchange_weak(
                                     flushed, covers, std::memory_order_acq_rel)) {
      }
      if (lost) {
        log::Error(
            "node '{}': a flush fails with EIO: writes the NBD server acknowledged before "
            "a lost connection were never flushed, and it may have lost them",
            link_.node_name);
        return -EIO;
      }
      return result;
    }
    default:
      return result;
  }
}

void NbdConnection::DisconnectFromStoppingServer() {
  // The server waits for every client, so the node's idle connections must leave too.
  if (announce_stopping_) {
    announce_stopping_ = false;
    if (link_.connector != nullptr) link_.connector->AnnounceServerStopping(this);
  }
  if (handle_ == nullptr || disconnect_sent_ || Nbd().nbd_aio_in_flight(handle_.get()) > 0) {
    return;
  }
  // The server closes the connection once it has the request; the closed handle is then lost
  // as any other.
  disconnect_sent_ = true;
  Nbd().nbd_aio_disconnect(handle_.get(), 0);
}

void NbdConnection::NoteLostReason() {
  const char* error = Nbd().nbd_get_error();
  if (lost_reason_.empty() && error != nullptr) lost_reason_ = error;
}

void NbdConnection::LoseConnection() {
  static log::RateLimit lost;
  if (disconnect_sent_ || cut_by_other_.exchange(false)) {
    lost_reason_ = "the server is shutting down (NBD_ESHUTDOWN)";
  } else if (Nbd().nbd_aio_is_closed(handle_.get())) {
    lost_reason_ = "the server closed it";
  }
  server_stopping_ = false;
  announce_stopping_ = false;
  disconnect_sent_ = false;
  // This connection's writes, and those of the node's other connections whose sockets the server
  // has closed too (the same crash; their idle threads would notice only later). Not the others':
  // a live socket reaches a server that came back since, which has their writes.
  const uint64_t flushed = link_.writes_flushed.load(std::memory_order_acquire);
  if (info_.can_flush && (last_acknowledged_.load(std::memory_order_relaxed) > flushed ||
                          OthersHoldLostWrites(flushed))) {
    link_.writes_maybe_lost.store(true, std::memory_order_release);
  }
  last_acknowledged_.store(0, std::memory_order_relaxed);
  const uint32_t delay = link_.options.reconnect_delay;
  log::Limited(lost, log::Level::kWarn, "node '{}': lost the connection to NBD server {} ({}); {}",
               link_.node_name, NbdAddress(link_.options),
               lost_reason_.empty() ? "no reason given" : lost_reason_,
               delay > 0 ? fmt::format("requests wait up to {} s for a new connection", delay)
                         : std::string("requests wait for one reconnect attempt, then fail with "
                                       "EIO until it is back"));
  lost_reason_.clear();
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, socket_fd_, nullptr);
  {
    std::lock_guard lock(socket_mutex_);
    socket_fd_ = -1;
  }
  handle_.reset();
  // With reconnect-delay=0 requests fail while the server is away, but only once an attempt
  // has failed: an idle queue notices a lost connection only with its next request, and QEMU,
  // which watches every connection, would have reconnected in the background meanwhile. The
  // connector's first attempt runs at once; the timer bounds one that hangs.
  first_attempt_only_ = delay == 0;
  state_ = State::kWaiting;
  struct itimerspec expiry = {};
  expiry.it_value.tv_sec = static_cast<time_t>(delay > 0 ? delay : kFirstAttemptWaitSeconds);
  timerfd_settime(timer_fd_, 0, &expiry, nullptr);
  attempt_failed_.store(false);
  link_.connector->Request(this);
}

void NbdConnection::Resume(IoRequest* request) {
  if (resumed_.Push(request)) util::SignalEventFd(wake_fd_);
}

void NbdConnection::AttemptFailed() {
  attempt_failed_.store(true);
  util::SignalEventFd(wake_fd_);
}

void NbdConnection::DelayOver() {
  if (state_ != State::kWaiting) return;
  const struct itimerspec disarm = {};
  timerfd_settime(timer_fd_, 0, &disarm, nullptr);
  // Not "still away": the server may be up but refused (a minimum block size that grew), which the
  // failed attempt logged.
  static log::RateLimit not_reconnected;
  log::Limited(not_reconnected, log::Level::kWarn,
               "node '{}': NBD server {} is not reconnected {}; requests fail with EIO until a "
               "reconnection succeeds",
               link_.node_name, NbdAddress(link_.options),
               first_attempt_only_
                   ? std::string("after the first reconnect attempt (reconnect-delay=0)")
                   : fmt::format("after reconnect-delay ({} s)", link_.options.reconnect_delay));
  state_ = State::kFailing;
  while (IoRequest* request = held_.PopFront()) Finish(request, -EIO);
}

void NbdConnection::ServerStopping() {
  // Not through libnbd, whose callbacks must run on this connection's thread: commands in flight
  // fail as cut off and go again on the next connection, and an idle connection's thread finds
  // the socket dead with its next request. The descriptor stays open until that thread closes it.
  std::lock_guard lock(socket_mutex_);
  if (socket_fd_ < 0) return;
  cut_by_other_.store(true);
  ::shutdown(socket_fd_, SHUT_RDWR);
}

bool NbdConnection::OthersHoldLostWrites(uint64_t flushed) {
  return link_.connector != nullptr && link_.connector->OthersHoldLostWrites(this, flushed);
}

bool NbdConnection::HoldsWritesOnLostSocket(uint64_t flushed) {
  if (last_acknowledged_.load(std::memory_order_relaxed) <= flushed) return false;
  // The descriptor stays open while socket_fd_ names it (its thread clears it first).
  std::lock_guard lock(socket_mutex_);
  if (socket_fd_ < 0) return false;  // its thread has seen the loss and judged its own writes
  struct pollfd socket = {socket_fd_, POLLRDHUP, 0};
  return ::poll(&socket, 1, 0) == 1 && (socket.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void NbdConnection::Reconnected(NbdHandle handle) {
  Nbd().nbd_close(delivered_.exchange(handle.release()));
  util::SignalEventFd(wake_fd_);
}

void NbdConnection::Install(NbdHandle handle) {
  if (handle_ != nullptr) return;  // already connected: the spare just closes
  if (absl::Status status = Adopt(std::move(handle)); !status.ok()) {
    log::Error("node '{}': {}", link_.node_name, std::string(status.message()));
    link_.connector->Request(this);
    return;
  }
  const struct itimerspec disarm = {};
  timerfd_settime(timer_fd_, 0, &disarm, nullptr);
  state_ = State::kConnected;
  static log::RateLimit reconnected;
  log::Limited(reconnected, log::Level::kInfo, "node '{}': reconnected to NBD server {}",
               link_.node_name, NbdAddress(link_.options));
  RequestList retry;
  retry.Splice(held_);
  while (IoRequest* request = retry.PopFront()) Issue(request);
}

void NbdConnection::WatchSocket() {
  if (handle_ == nullptr) return;
  const bool wants_write = Nbd().nbd_aio_get_direction(handle_.get()) & LIBNBD_AIO_DIRECTION_WRITE;
  const uint32_t events = EPOLLIN | (wants_write ? uint32_t{EPOLLOUT} : 0u);
  if (events == socket_events_) return;
  struct epoll_event event = {.events = events, .data = {.u32 = kSocketTag}};
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, socket_fd_, &event) == 0) socket_events_ = events;
}

}  // namespace bexd::block
