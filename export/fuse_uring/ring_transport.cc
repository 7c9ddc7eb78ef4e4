// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_uring/ring_transport.h"

#include <errno.h>
#include <linux/fuse.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "util/log.h"
#include "util/status.h"

namespace bexd::exports {
namespace {

using fuse::abi::fuse_uring_cmd_req;
using fuse::abi::fuse_uring_req_header;

constexpr size_t kInHeaderBytes = sizeof(struct fuse_in_header);
constexpr size_t kOutHeaderBytes = sizeof(struct fuse_out_header);

// Errors with which the kernel ends an entry's command because the connection is going away:
// an unmount or abort (ENOTCONN, ECONNABORTED), or the ring's task exiting (ECANCELED).
bool ConnectionEnded(int error) {
  return error == ENOTCONN || error == ECONNABORTED || error == ECANCELED || error == ENODEV;
}

// io_uring_enter failures that pass: interrupted, or short of memory for a moment. The commands
// stay in the submission ring for the next try.
bool SubmitCanRetry(int error) { return error == EINTR || error == EAGAIN || error == EBUSY; }

}  // namespace

absl::StatusOr<std::unique_ptr<FuseRingTransport>> FuseRingTransport::Create(
    uint16_t queue, uint32_t depth, const fuse::Session& session, int device, ExitFn on_exit) {
  if (depth == 0 || depth > kMaxDepth) {
    return absl::InvalidArgumentError(
        fmt::format("io_uring queue depth {} is not in [1, {}]", depth, kMaxDepth));
  }
  // The kernel refuses a payload buffer smaller than the largest request or reply it may carry:
  // max(FUSE_MIN_READ_BUFFER, max_write, max_pages pages), which INIT sets from max_write.
  const size_t payload_bytes = std::max<size_t>({FUSE_MIN_READ_BUFFER, session.options().max_write,
                                                 session.max_reply_bytes() - kOutHeaderBytes});
  absl::StatusOr<RingBuffers> buffers = RingBuffers::Create(depth, payload_bytes);
  if (!buffers.ok()) return buffers.status();
  return std::unique_ptr<FuseRingTransport>(
      new FuseRingTransport(queue, depth, device, std::move(*buffers), std::move(on_exit)));
}

FuseRingTransport::FuseRingTransport(uint16_t queue, uint32_t depth, int device,
                                     RingBuffers buffers, ExitFn on_exit)
    : queue_(queue),
      depth_(depth),
      device_(device),
      buffers_(std::move(buffers)),
      on_exit_(std::move(on_exit)),
      register_iov_(new struct iovec[2 * size_t{depth}]),
      in_(new struct iovec[3 * size_t{depth}]),
      out_(new struct iovec[2 * size_t{depth}]),
      commit_id_(new uint64_t[depth]()),
      slot_entry_(new uint32_t[depth]()) {
  for (uint32_t entry = 0; entry < depth; ++entry) {
    fuse_uring_req_header& header = buffers_.header(entry);
    register_iov_[2 * entry] = {&header, sizeof(header)};
    register_iov_[2 * entry + 1] = {buffers_.payload(entry), buffers_.payload_bytes()};
    // The reply: its fuse_out_header in the header buffer, every reply argument (READ data
    // first of all) at the start of the payload buffer.
    out_[2 * entry] = {header.in_out, kOutHeaderBytes};
    out_[2 * entry + 1] = {buffers_.payload(entry), buffers_.payload_bytes()};
  }
}

FuseRingTransport::~FuseRingTransport() { CloseRing(); }

absl::Status FuseRingTransport::Attach(QueueThread& thread) {
  if (thread.slot_count() != depth_) {
    return absl::InvalidArgumentError(fmt::format(
        "the io_uring transport has {} entries, not {} slots", depth_, thread.slot_count()));
  }
  thread_ = &thread;
  ended_ = false;
  unsubmitted_ = 0;
  std::vector<struct iovec> payloads(depth_);
  for (uint32_t entry = 0; entry < depth_; ++entry) {
    payloads[entry] = {buffers_.payload(entry), buffers_.payload_bytes()};
  }
  thread.UseBuffers(payloads);
  // 128-byte SQEs hold the FUSE command (fuse_uring_cmd_req) in their command area. Created here,
  // on the queue thread: the kernel copies each request into the entry's buffers in the context
  // of the task that submitted its command, and only this thread ever submits.
  struct io_uring_params params = {};
  params.flags = IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER;
  const int error = io_uring_queue_init_params(depth_, &ring_, &params);
  if (error < 0) {
    return util::ErrnoStatus(-error, "cannot create the io_uring of FUSE queue {}", queue_);
  }
  ring_open_ = true;
  absl::Status status = thread.loop().Watch(ring_.ring_fd, EPOLLIN, kRingTag);
  if (status.ok()) status = Register();
  if (!status.ok()) CloseRing();
  return status;
}

absl::Status FuseRingTransport::Register() {
  for (uint32_t entry = 0; entry < depth_; ++entry) {
    if (!PrepareCommand(entry, fuse::abi::FUSE_IO_URING_CMD_REGISTER)) {
      return absl::InternalError(fmt::format(
          "the submission ring of FUSE queue {} has no room for entry {}", queue_, entry));
    }
  }
  const int submitted = io_uring_submit(&ring_);
  if (submitted < 0) {
    return util::ErrnoStatus(-submitted, "cannot submit the ring entries of FUSE queue {}", queue_);
  }
  unsubmitted_ = 0;
  // The kernel registers inline and fails at once; an entry that registered completes only when
  // a request arrives, which stays in the completion ring for Fetch().
  unsigned head;
  struct io_uring_cqe* cqe;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    if (cqe->res < 0) {
      return util::ErrnoStatus(-cqe->res, "the kernel refused the ring entries of FUSE queue {}",
                               queue_);
    }
  }
  return absl::OkStatus();
}

bool FuseRingTransport::PrepareCommand(uint32_t entry, uint32_t command) {
  struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) return false;
  // 128 bytes with IORING_SETUP_SQE128: the command area follows the classic 64.
  std::memset(sqe, 0, 2 * sizeof(*sqe));
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = device_;
  sqe->cmd_op = command;
  sqe->user_data = entry;
  if (command == fuse::abi::FUSE_IO_URING_CMD_REGISTER) {
    sqe->addr = reinterpret_cast<uintptr_t>(&register_iov_[2 * entry]);
    sqe->len = 2;
  }
  fuse_uring_cmd_req request = {};
  request.commit_id = commit_id_[entry];
  request.qid = queue_;
  std::memcpy(sqe->cmd, &request, sizeof(request));
  ++unsubmitted_;
  return true;
}

bool FuseRingTransport::Submit() {
  if (unsubmitted_ == 0) return true;
  const int submitted = io_uring_submit(&ring_);
  if (submitted >= 0) {
    unsubmitted_ = 0;
    return true;
  }
  if (SubmitCanRetry(-submitted)) return true;
  log::Error("{}: submitting to io_uring failed: {}", thread_->label(), std::strerror(-submitted));
  return false;
}

QueueTransport::Fetched FuseRingTransport::Fetch(QueueThread& thread, bool idle) {
  if (idle && io_uring_cq_ready(&ring_) == 0) {
    // Only a request can give this thread work: hand over the last replies and wait for it in one
    // system call.
    const int result = io_uring_submit_and_wait(&ring_, 1);
    if (result >= 0) {
      unsubmitted_ = 0;
    } else if (!SubmitCanRetry(-result)) {
      log::Error("{}: waiting on io_uring failed: {}", thread.label(), std::strerror(-result));
      thread.EndServing(/*failed=*/true);
      return Fetched::kEmpty;
    }
  }
  if (!Reap()) {
    thread.EndServing(/*failed=*/true);
    return Fetched::kEmpty;
  }
  return io_uring_cq_ready(&ring_) > 0 && thread.has_free_slot() ? Fetched::kMore : Fetched::kEmpty;
}

bool FuseRingTransport::Reap() {
  struct io_uring_cqe* cqe = nullptr;
  while (thread_->has_free_slot() && io_uring_peek_cqe(&ring_, &cqe) == 0) {
    const auto entry = static_cast<uint32_t>(cqe->user_data);
    const int result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (result < 0 || entry >= depth_) {
      EndRing(result < 0 ? -result : EPROTO);
      return false;
    }
    Dispatch(entry);
  }
  return !ended_;
}

void FuseRingTransport::EndRing(int error) {
  if (ended_) return;
  ended_ = true;
  if (ConnectionEnded(error)) {
    log::Info("{}: the FUSE connection has ended", thread_->label());
  } else {
    log::Error("{}: the kernel ended a ring entry's command: {}", thread_->label(),
               std::strerror(error));
  }
}

void FuseRingTransport::Dispatch(uint32_t entry) {
  fuse_uring_req_header& header = buffers_.header(entry);
  struct fuse_in_header in;
  std::memcpy(&in, header.in_out, sizeof(in));
  const size_t payload = header.ring_ent_in_out.payload_sz;
  commit_id_[entry] = header.ring_ent_in_out.commit_id;
  // The request is its header, the opcode's first argument in op_in, and the rest in the payload
  // buffer; the header's length counts all three.
  const size_t argument = in.len - std::min<size_t>(in.len, kInHeaderBytes + payload);
  if (in.len < kInHeaderBytes + payload || argument > sizeof(header.op_in) ||
      payload > buffers_.payload_bytes()) {
    // Only a kernel bug gets here; the kernel then waits for an answer the core cannot build.
    log::Error(
        "{}: the kernel sent a malformed FUSE request (length {}, payload {}); shutting "
        "the export down",
        thread_->label(), in.len, payload);
    EndRing(EPROTO);
    thread_->EndServing(/*failed=*/true);
    return;
  }
  struct iovec* in_iov = &in_[3 * size_t{entry}];
  int count = 0;
  in_iov[count++] = {header.in_out, kInHeaderBytes};
  if (argument > 0) in_iov[count++] = {header.op_in, argument};
  if (payload > 0) in_iov[count++] = {buffers_.payload(entry), payload};
  const uint32_t slot = thread_->next_slot();
  slot_entry_[slot] = entry;
  fuse::Request& request = thread_->request(slot);
  request.in = in_iov;
  request.in_count = count;
  request.out = &out_[2 * size_t{entry}];
  request.out_count = 2;
  thread_->DispatchNext();
}

void FuseRingTransport::Reply(uint32_t slot, int64_t result) {
  const uint32_t entry = slot_entry_[slot];
  if (result < static_cast<int64_t>(kOutHeaderBytes)) {
    // The kernel sends no request without a reply over a ring (FORGET and INTERRUPT come over
    // /dev/fuse), and the entry stays blocked until it gets one; only ending the connection
    // releases its caller.
    log::Error(
        "{}: the kernel sent a FUSE request the core could not answer ({}); shutting the "
        "export down",
        thread_->label(),
        result < 0 ? std::strerror(static_cast<int>(-result)) : "it takes no reply");
    thread_->EndServing(/*failed=*/true);
    return;
  }
  buffers_.header(entry).ring_ent_in_out.payload_sz =
      static_cast<uint32_t>(result - static_cast<int64_t>(kOutHeaderBytes));
  if (!PrepareCommand(entry, fuse::abi::FUSE_IO_URING_CMD_COMMIT_AND_FETCH)) {
    log::Error("{}: no room in the submission ring to answer entry {}", thread_->label(), entry);
    thread_->EndServing(/*failed=*/true);
  }
}

void FuseRingTransport::Flush() {
  // An idle thread submits in its wait for the next request (Fetch), saving a system call, or,
  // stopping, in Detach().
  if (thread_->idle()) return;
  if (!Submit()) thread_->EndServing(/*failed=*/true);
}

bool FuseRingTransport::PrepareToSleep(QueueThread& thread) {
  if (!Submit()) {
    thread.EndServing(/*failed=*/true);
    return false;
  }
  return io_uring_cq_ready(&ring_) == 0;
}

void FuseRingTransport::Detach(bool failed) {
  // Replies still in the submission ring reach their callers before the ring goes.
  if (ring_open_) Submit();
  CloseRing();
  thread_ = nullptr;
  if (on_exit_) on_exit_(queue_, failed);
}

void FuseRingTransport::CloseRing() {
  if (!ring_open_) return;
  ring_open_ = false;
  // The kernel cancels the commands still waiting for requests; requests already in entries
  // fail when the connection ends.
  io_uring_queue_exit(&ring_);
}

}  // namespace bexd::exports
