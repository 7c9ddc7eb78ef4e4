// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/fuse/core_harness.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <time.h>

#include <algorithm>

#include "block/open.h"
#include "util/clock.h"

namespace bexd::fuse::testing {
namespace {

std::vector<struct iovec> Pieces(uint8_t* base, size_t bytes, size_t piece) {
  std::vector<struct iovec> iov;
  if (piece == 0) piece = bytes == 0 ? 1 : bytes;
  for (size_t at = 0; at < bytes; at += piece) {
    iov.push_back({base + at, std::min(piece, bytes - at)});
  }
  return iov;
}

std::shared_ptr<block::BlockNode> OpenNode(const block::BlockdevOptions& blockdev) {
  absl::StatusOr<std::shared_ptr<block::BlockNode>> node = block::OpenBlockNode(blockdev);
  if (!node.ok()) {
    ADD_FAILURE() << node.status();
    return nullptr;
  }
  return *node;
}

uint64_t NowMs() { return util::MonotonicNs() / 1'000'000; }

}  // namespace

RequestBytes::RequestBytes(uint32_t opcode, uint64_t node_id, uint64_t unique) {
  struct fuse_in_header header;
  std::memset(&header, 0, sizeof(header));
  header.opcode = opcode;
  header.unique = unique;
  header.nodeid = node_id;
  AppendBytes(&header, sizeof(header));
}

RequestBytes& RequestBytes::AppendBytes(const void* data, size_t n) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  bytes_.insert(bytes_.end(), bytes, bytes + n);
  return *this;
}

RequestBytes& RequestBytes::AppendString(const std::string& text) {
  return AppendBytes(text.c_str(), text.size() + 1);
}

std::vector<uint8_t> RequestBytes::Finish() const {
  return FinishWithLength(static_cast<uint32_t>(bytes_.size()));
}

std::vector<uint8_t> RequestBytes::FinishWithLength(uint32_t len) const {
  std::vector<uint8_t> bytes = bytes_;
  std::memcpy(bytes.data(), &len, sizeof(len));  // fuse_in_header.len comes first
  return bytes;
}

struct fuse_out_header Reply::header() const {
  struct fuse_out_header header;
  std::memset(&header, 0, sizeof(header));
  if (bytes.size() >= sizeof(header)) std::memcpy(&header, bytes.data(), sizeof(header));
  return header;
}

std::vector<uint8_t> Reply::data() const {
  if (bytes.size() <= sizeof(struct fuse_out_header)) return {};
  return {bytes.begin() + sizeof(struct fuse_out_header), bytes.end()};
}

CoreHarness::CoreHarness(const block::BlockdevOptions& blockdev, const SessionOptions& options)
    : CoreHarness(OpenNode(blockdev), options) {}

CoreHarness::CoreHarness(std::shared_ptr<block::BlockNode> node, const SessionOptions& options)
    : node_(std::move(node)) {
  if (node_ == nullptr) return;
  auto session = Session::Create(node_, options);
  if (!session.ok()) {
    ADD_FAILURE() << session.status();
    return;
  }
  session_ = *session;
  auto io_queue = node_->CreateQueue();
  if (!io_queue.ok()) {
    ADD_FAILURE() << io_queue.status();
    return;
  }
  queue_ = std::make_unique<Queue>(session_, std::move(*io_queue), &CoreHarness::OnComplete, this);
}

CoreHarness::~CoreHarness() = default;

void CoreHarness::OnComplete(Request* request, int64_t result, void* context) {
  auto* outcome = static_cast<Outcome*>(request->transport);
  ++outcome->completions;
  outcome->result = result;
}

namespace {

// One request's buffers as a transport would lay them out.
struct Slot {
  std::vector<uint8_t> in_buffer;
  std::vector<uint8_t> out_buffer;
  uint8_t* out_base = nullptr;
  std::vector<struct iovec> in_iov;
  std::vector<struct iovec> out_iov;
  std::unique_ptr<Request> request = std::make_unique<Request>();
};

void Prepare(const std::vector<uint8_t>& bytes, const Layout& layout, Slot* slot) {
  // Distinctive filler, so that bytes the core did not write are recognisable.
  slot->in_buffer.assign(
      std::max(bytes.size(), layout.out_aliases_in ? layout.out_capacity : bytes.size()), 0xa5);
  std::copy(bytes.begin(), bytes.end(), slot->in_buffer.begin());
  slot->out_buffer.assign(layout.out_aliases_in ? 0 : layout.out_capacity, 0x5a);
  slot->out_base = layout.out_aliases_in ? slot->in_buffer.data() : slot->out_buffer.data();
  slot->in_iov = Pieces(slot->in_buffer.data(), bytes.size(), layout.in_piece);
  slot->out_iov = Pieces(slot->out_base, layout.out_capacity, layout.out_piece);
  slot->request->in = slot->in_iov.data();
  slot->request->in_count = static_cast<int>(slot->in_iov.size());
  slot->request->out = slot->out_iov.data();
  slot->request->out_count = static_cast<int>(slot->out_iov.size());
}

}  // namespace

void CoreHarness::PollUntilDone(const std::vector<Outcome>& outcomes) {
  auto done = [&outcomes] {
    return std::all_of(outcomes.begin(), outcomes.end(),
                       [](const Outcome& outcome) { return outcome.completions > 0; });
  };
  const uint64_t deadline = NowMs() + 10000;
  block::IoQueue& io = queue_->io_queue();
  while (!done() && NowMs() < deadline) {
    io.Poll();
    if (done()) break;
    if (io.event_fd() >= 0) {
      struct pollfd fd = {io.event_fd(), POLLIN, 0};
      ::poll(&fd, 1, 10);
    }
  }
  // Anything still pending would show up as a second completion here.
  io.Poll();
  if (!done()) ADD_FAILURE() << "requests did not complete within 10 s";
}

std::vector<Reply> CoreHarness::RunConcurrently(const std::vector<std::vector<uint8_t>>& requests,
                                                const Layout& layout) {
  std::vector<Reply> replies(requests.size());
  if (queue_ == nullptr) {
    ADD_FAILURE() << "no queue";
    return replies;
  }
  std::vector<Slot> slots(requests.size());
  std::vector<Outcome> outcomes(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    Prepare(requests[i], layout, &slots[i]);
    slots[i].request->transport = &outcomes[i];
    queue_->Dispatch(slots[i].request.get());
  }
  PollUntilDone(outcomes);
  for (size_t i = 0; i < requests.size(); ++i) {
    replies[i].completions = outcomes[i].completions;
    replies[i].result = outcomes[i].result;
    if (outcomes[i].result > 0) {
      const size_t n = std::min<size_t>(outcomes[i].result, layout.out_capacity);
      replies[i].bytes.assign(slots[i].out_base, slots[i].out_base + n);
    }
  }
  return replies;
}

Reply CoreHarness::Run(const std::vector<uint8_t>& request, const Layout& layout) {
  return RunConcurrently({request}, layout).front();
}

void CoreHarness::Init() {
  Reply reply = Run(InitRequest());
  ASSERT_EQ(reply.completions, 1);
  ASSERT_GT(reply.result, 0);
  ASSERT_EQ(reply.header().error, 0);
  ASSERT_TRUE(session_->initialized());
}

SessionOptions Writable(bool growable, bool resize_needs_growable) {
  SessionOptions options;
  options.writable = true;
  options.growable = growable;
  options.resize_needs_growable = resize_needs_growable;
  return options;
}

std::vector<uint8_t> InitRequest(uint32_t major, uint32_t minor, uint32_t flags) {
  struct fuse_init_in in;
  std::memset(&in, 0, sizeof(in));
  in.major = major;
  in.minor = minor;
  in.max_readahead = 128 * 1024;
  in.flags = flags;
  in.flags2 = 0xffffffffu;
  return RequestBytes(FUSE_INIT, 0, 1).Append(in).Finish();
}

std::vector<uint8_t> ReadRequest(uint64_t node_id, uint64_t offset, uint32_t size) {
  struct fuse_read_in in;
  std::memset(&in, 0, sizeof(in));
  in.fh = 1;
  in.offset = offset;
  in.size = size;
  return RequestBytes(FUSE_READ, node_id).Append(in).Finish();
}

std::vector<uint8_t> WriteRequest(uint64_t node_id, uint64_t offset,
                                  const std::vector<uint8_t>& data, uint32_t open_flags) {
  struct fuse_write_in in;
  std::memset(&in, 0, sizeof(in));
  in.fh = 1;
  in.offset = offset;
  in.size = static_cast<uint32_t>(data.size());
  in.flags = open_flags;
  return RequestBytes(FUSE_WRITE, node_id)
      .Append(in)
      .AppendBytes(data.data(), data.size())
      .Finish();
}

std::vector<uint8_t> OpenRequest(uint64_t node_id, uint32_t open_flags) {
  struct fuse_open_in in;
  std::memset(&in, 0, sizeof(in));
  in.flags = open_flags;
  return RequestBytes(FUSE_OPEN, node_id).Append(in).Finish();
}

std::vector<uint8_t> GetattrRequest(uint64_t node_id) {
  struct fuse_getattr_in in;
  std::memset(&in, 0, sizeof(in));
  return RequestBytes(FUSE_GETATTR, node_id).Append(in).Finish();
}

std::vector<uint8_t> SetattrSizeRequest(uint64_t node_id, uint64_t size) {
  struct fuse_setattr_in in;
  std::memset(&in, 0, sizeof(in));
  in.valid = FATTR_SIZE;
  in.size = size;
  return RequestBytes(FUSE_SETATTR, node_id).Append(in).Finish();
}

std::vector<uint8_t> FallocateRequest(uint64_t node_id, uint64_t offset, uint64_t length,
                                      uint32_t mode) {
  struct fuse_fallocate_in in;
  std::memset(&in, 0, sizeof(in));
  in.fh = 1;
  in.offset = offset;
  in.length = length;
  in.mode = mode;
  return RequestBytes(FUSE_FALLOCATE, node_id).Append(in).Finish();
}

std::vector<uint8_t> LseekRequest(uint64_t node_id, uint64_t offset, uint32_t whence) {
  fuse_lseek_in in{1, offset, whence, 0};
  return RequestBytes(FUSE_LSEEK, node_id).Append(in).Finish();
}

std::vector<uint8_t> FsyncRequest(uint64_t node_id) {
  fuse_fsync_in in{1, 0, 0};
  return RequestBytes(FUSE_FSYNC, node_id).Append(in).Finish();
}

}  // namespace bexd::fuse::testing
