#include "tests/fuse/core_harness.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <time.h>

#include <algorithm>

#include "block/open.h"

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

uint64_t NowMs() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000 + static_cast<uint64_t>(now.tv_nsec) / 1000000;
}

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

CoreHarness::CoreHarness(const block::BlockdevOptions& blockdev, const SessionOptions& options) {
  auto node = block::OpenBlockNode(blockdev);
  if (!node.ok()) {
    ADD_FAILURE() << node.status();
    return;
  }
  node_ = *node;
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
  auto* harness = static_cast<CoreHarness*>(context);
  ++harness->completions_;
  harness->last_result_ = result;
}

Reply CoreHarness::Run(const std::vector<uint8_t>& request, const Layout& layout) {
  Reply reply;
  if (queue_ == nullptr) {
    ADD_FAILURE() << "no queue";
    return reply;
  }
  // Distinctive filler, so that bytes the core did not write are recognisable.
  std::vector<uint8_t> in_buffer(
      std::max(request.size(), layout.out_aliases_in ? layout.out_capacity : request.size()), 0xa5);
  std::copy(request.begin(), request.end(), in_buffer.begin());
  std::vector<uint8_t> out_buffer(layout.out_aliases_in ? 0 : layout.out_capacity, 0x5a);
  uint8_t* out_base = layout.out_aliases_in ? in_buffer.data() : out_buffer.data();

  std::vector<struct iovec> in_iov = Pieces(in_buffer.data(), request.size(), layout.in_piece);
  std::vector<struct iovec> out_iov = Pieces(out_base, layout.out_capacity, layout.out_piece);
  auto slot = std::make_unique<Request>();
  slot->in = in_iov.data();
  slot->in_count = static_cast<int>(in_iov.size());
  slot->out = out_iov.data();
  slot->out_count = static_cast<int>(out_iov.size());

  completions_ = 0;
  queue_->Dispatch(slot.get());
  const uint64_t deadline = NowMs() + 10000;
  block::IoQueue& io = queue_->io_queue();
  while (completions_ == 0 && NowMs() < deadline) {
    io.Poll();
    if (completions_ != 0) break;
    if (io.event_fd() >= 0) {
      struct pollfd fd = {io.event_fd(), POLLIN, 0};
      ::poll(&fd, 1, 10);
    }
  }
  // Anything still pending would show up as a second completion here.
  io.Poll();
  reply.completions = completions_;
  reply.result = last_result_;
  if (completions_ == 0) {
    ADD_FAILURE() << "request did not complete within 10 s";
    return reply;
  }
  if (reply.result > 0) {
    size_t n = std::min<size_t>(reply.result, layout.out_capacity);
    reply.bytes.assign(out_base, out_base + n);
  }
  return reply;
}

void CoreHarness::Init() {
  Reply reply = Run(InitRequest());
  ASSERT_EQ(reply.completions, 1);
  ASSERT_GT(reply.result, 0);
  ASSERT_EQ(reply.header().error, 0);
  ASSERT_TRUE(session_->initialized());
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

}  // namespace bexd::fuse::testing
