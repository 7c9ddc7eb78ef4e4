// SPDX-License-Identifier: GPL-2.0-or-later
#include "vhost_frontend/frontend.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "export/vhost_user/vhost_user_protocol.h"
#include "export/vhost_user/virtqueue.h"
#include "util/eventfd.h"
#include "util/status.h"

namespace bexd::test::vhost {
namespace {

namespace proto = exports::vhost;
namespace vring = exports::vring;

constexpr uint64_t kPage = 4096;
constexpr size_t kScratchBytes = 1 << 20;
constexpr size_t kIndirectBytes = 4096;  // per slot, at the start of its buffer

uint64_t RoundUp(uint64_t value, uint64_t to) { return (value + to - 1) / to * to; }

// A timerfd that becomes readable after `timeout`: the cancel fd that bounds a protocol wait.
util::UniqueFd Deadline(std::chrono::milliseconds timeout) {
  util::UniqueFd fd(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC));
  struct itimerspec spec = {};
  spec.it_value.tv_sec = timeout.count() / 1000;
  spec.it_value.tv_nsec = (timeout.count() % 1000) * 1000000;
  if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
  timerfd_settime(fd.get(), 0, &spec, nullptr);
  return fd;
}

bool NeedEvent(uint16_t event, uint16_t new_idx, uint16_t old_idx) {
  return static_cast<uint16_t>(new_idx - event - 1) < static_cast<uint16_t>(new_idx - old_idx);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Frontend>> Frontend::Connect(const FrontendOptions& options) {
  if (options.max_in_flight == 0 || options.queue_size % options.max_in_flight != 0 ||
      options.queue_size / options.max_in_flight < 4 ||
      options.slot_buffer_bytes < kIndirectBytes + 2 * kPage) {
    return absl::InvalidArgumentError("frontend options do not leave 4 descriptors per slot");
  }
  std::unique_ptr<Frontend> frontend(new Frontend(options));
  if (absl::Status s = frontend->SetUp(); !s.ok()) return s;
  return frontend;
}

Frontend::~Frontend() {
  Drop();
  if (memory_ != nullptr) munmap(memory_, memory_bytes_);
}

void Frontend::Drop() { socket_.Reset(); }

unsigned char* Frontend::GuestPtr(uint64_t gpa) const { return memory_ + gpa; }

uint16_t Frontend::DescsPerSlot(const Ring& ring) const {
  return static_cast<uint16_t>(ring.size / options_.max_in_flight);
}

uint64_t Frontend::SlotGpa(const Ring& ring, int slot) const {
  return ring.slots_gpa + static_cast<uint64_t>(slot) * options_.slot_buffer_bytes;
}

absl::Status Frontend::SetUp() {
  const uint32_t ring_count = options_.request_queues + 1;
  // Layout: a guard page, then per ring its three parts and its slot buffers, then (straddling
  // the middle, where the two-region split falls) a scratch area.
  uint64_t at = kPage;
  rings_.resize(ring_count);
  for (Ring& ring : rings_) {
    ring.size = options_.queue_size;
    ring.desc_gpa = at;
    at = RoundUp(at + 16 * ring.size, kPage);
    ring.avail_gpa = at;
    at = RoundUp(at + 6 + 2 * ring.size, kPage);
    ring.used_gpa = at;
    at = RoundUp(at + 6 + 8 * ring.size, kPage);
    ring.slots_gpa = at;
    at += RoundUp(uint64_t{options_.max_in_flight} * options_.slot_buffer_bytes, kPage);
    ring.busy.assign(options_.max_in_flight, false);
    ring.reply_offset.assign(options_.max_in_flight, 0);
  }
  uint64_t half = RoundUp(at + kScratchBytes / 2, 2 << 20);
  memory_bytes_ = 2 * half;
  scratch_gpa_ = half - kScratchBytes / 2;

  if (options_.memory_path.empty()) {
    memory_fd_.Reset(memfd_create("vhost-test-guest", MFD_CLOEXEC));
    if (!memory_fd_) return util::ErrnoStatus(errno, "memfd_create");
  } else {
    memory_fd_.Reset(open(options_.memory_path.c_str(), O_RDWR | O_CLOEXEC));
    if (!memory_fd_) return util::ErrnoStatus(errno, "open {}", options_.memory_path);
  }
  // The end of a block device is its capacity; a file (or the memfd) is grown.
  off_t end = lseek(memory_fd_.get(), 0, SEEK_END);
  if (end < 0) return util::ErrnoStatus(errno, "lseek");
  if (static_cast<uint64_t>(end) < memory_bytes_ &&
      ftruncate(memory_fd_.get(), static_cast<off_t>(memory_bytes_)) != 0) {
    return util::ErrnoStatus(errno, "guest memory needs {} bytes: ftruncate", memory_bytes_);
  }
  void* map = mmap(nullptr, memory_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, memory_fd_.get(), 0);
  if (map == MAP_FAILED) return util::ErrnoStatus(errno, "mmap");
  memory_ = static_cast<unsigned char*>(map);

  // Connect, retrying while the backend is still coming up.
  util::UniqueFd deadline = Deadline(options_.timeout);
  struct sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  if (options_.socket_path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError("socket path too long");
  }
  memcpy(address.sun_path, options_.socket_path.data(), options_.socket_path.size());
  for (;;) {
    socket_.Reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (connect(socket_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) break;
    struct pollfd p = {deadline.get(), POLLIN, 0};
    if (poll(&p, 1, 20) > 0) {
      return absl::DeadlineExceededError("cannot connect to " + options_.socket_path);
    }
  }

  if (absl::StatusOr<uint64_t> r = Send(proto::kSetOwner, nullptr, 0, {}, false); !r.ok()) {
    return r.status();
  }
  absl::StatusOr<uint64_t> offered = Query(proto::kGetFeatures);
  if (!offered.ok()) return offered.status();
  uint64_t wanted = proto::kFeatureVersion1 | proto::kFeatureProtocolFeatures;
  if (options_.event_idx) wanted |= proto::kFeatureEventIdx;
  if (options_.indirect) wanted |= proto::kFeatureIndirectDesc;
  if ((*offered & wanted) != wanted) return absl::FailedPreconditionError("features missing");

  uint64_t protocol = proto::kProtocolMq | proto::kProtocolReplyAck;
  if (absl::StatusOr<uint64_t> r = Send(proto::kSetProtocolFeatures, &protocol, 8, {}, false);
      !r.ok()) {
    return r.status();
  }
  absl::StatusOr<uint64_t> queue_num = Query(proto::kGetQueueNum);
  if (!queue_num.ok()) return queue_num.status();
  if (*queue_num < ring_count) return absl::FailedPreconditionError("backend has too few queues");
  if (absl::Status s = Apply(proto::kSetFeatures, &wanted, sizeof(wanted)); !s.ok()) return s;
  if (absl::Status s = SendMemTable(); !s.ok()) return s;
  for (uint32_t i = 0; i < ring_count; ++i) {
    if (absl::Status s = StartRing(i); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Frontend::SendMemTable() {
  proto::Memory table = {};
  std::vector<int> fds;
  if (options_.two_regions) {
    uint64_t half = memory_bytes_ / 2;
    table.nregions = 2;
    table.regions[0] = {0, half, reinterpret_cast<uint64_t>(memory_), 0};
    table.regions[1] = {half, half, reinterpret_cast<uint64_t>(memory_) + half, half};
    fds = {memory_fd_.get(), memory_fd_.get()};
  } else {
    table.nregions = 1;
    table.regions[0] = {0, memory_bytes_, reinterpret_cast<uint64_t>(memory_), 0};
    fds = {memory_fd_.get()};
  }
  return Apply(proto::kSetMemTable, &table, sizeof(table), fds);
}

bool Frontend::WaitRingError(uint32_t index) {
  struct pollfd p = {rings_[index].err.get(), POLLIN, 0};
  return poll(&p, 1, static_cast<int>(options_.timeout.count())) == 1;
}

absl::Status Frontend::StartRing(uint32_t index, uint16_t base_ahead) {
  Ring& ring = rings_[index];
  for (util::UniqueFd* fd : {&ring.kick, &ring.call, &ring.err}) {
    absl::StatusOr<util::UniqueFd> created = util::CreateEventFd();
    if (!created.ok()) return created.status();
    *fd = std::move(*created);
  }
  ring.kick_peer.Reset();
  if (options_.kick_socket) {
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, ends) != 0) {
      return util::ErrnoStatus(errno, "socketpair");
    }
    ring.kick_peer = util::UniqueFd(ends[0]);
    ring.kick = util::UniqueFd(ends[1]);
  }
  const int backend_kick = options_.kick_socket ? ring.kick_peer.get() : ring.kick.get();
  proto::VringState num = {index, ring.size};
  proto::VringState base = {index, static_cast<uint16_t>(ring.avail_idx + base_ahead)};
  proto::VringAddr addr = {index,
                           0,
                           reinterpret_cast<uint64_t>(GuestPtr(ring.desc_gpa)),
                           reinterpret_cast<uint64_t>(GuestPtr(ring.used_gpa)),
                           reinterpret_cast<uint64_t>(GuestPtr(ring.avail_gpa)),
                           0};
  uint64_t kick = index, call = index, err = index;
  proto::VringState enable = {index, 1};
  struct Step {
    uint32_t request;
    const void* payload;
    size_t size;
    std::vector<int> fds;
  } steps[] = {
      {proto::kSetVringNum, &num, sizeof(num), {}},
      {proto::kSetVringBase, &base, sizeof(base), {}},
      {proto::kSetVringAddr, &addr, sizeof(addr), {}},
      {proto::kSetVringKick, &kick, sizeof(kick), {backend_kick}},
      {proto::kSetVringCall, &call, sizeof(call), {ring.call.get()}},
      {proto::kSetVringErr, &err, sizeof(err), {ring.err.get()}},
      {proto::kSetVringEnable, &enable, sizeof(enable), {}},
  };
  for (const Step& step : steps) {
    if (absl::Status s = Apply(step.request, step.payload, step.size, step.fds); !s.ok()) {
      return absl::Status(s.code(), fmt::format("vring {}: {}", index, std::string(s.message())));
    }
  }
  return absl::OkStatus();
}

absl::Status Frontend::Apply(uint32_t request, const void* payload, size_t size,
                             const std::vector<int>& fds) {
  absl::StatusOr<uint64_t> verdict = Send(request, payload, size, fds);
  if (!verdict.ok()) return verdict.status();
  if (*verdict != 0) return absl::InternalError(fmt::format("message {} refused", request));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Frontend::Query(uint32_t request) {
  absl::StatusOr<uint64_t> sent = Send(request, nullptr, 0, {}, false);
  if (!sent.ok()) return sent.status();
  absl::StatusOr<proto::Message> reply = Receive();
  if (!reply.ok()) return reply.status();
  const uint64_t* value = reply->PayloadAs<uint64_t>();
  if (reply->header.request != request || value == nullptr) {
    return absl::InternalError(fmt::format("malformed reply to message {}", request));
  }
  return *value;
}

absl::StatusOr<uint64_t> Frontend::Send(uint32_t request, const void* payload, size_t size,
                                        const std::vector<int>& fds, bool ack) {
  if (!socket_) return absl::FailedPreconditionError("not connected");
  proto::Header header = {request, proto::kVersion | (ack ? proto::kFlagNeedReply : 0u),
                          static_cast<uint32_t>(size)};
  util::UniqueFd deadline = Deadline(options_.timeout);
  if (absl::Status s = proto::SendMessage(socket_.get(), deadline.get(), header, payload, size,
                                          fds.data(), static_cast<int>(fds.size()));
      !s.ok()) {
    return s;
  }
  if (!ack) return 0;
  absl::StatusOr<proto::Message> reply = Receive();
  if (!reply.ok()) return reply.status();
  if (reply->header.request != request || reply->header.size != sizeof(uint64_t)) {
    return absl::InternalError(fmt::format("bad acknowledgement for message {}", request));
  }
  uint64_t value;
  memcpy(&value, reply->payload, sizeof(value));
  return value;
}

absl::StatusOr<proto::Message> Frontend::Receive() {
  proto::Message message;
  util::UniqueFd deadline = Deadline(options_.timeout);
  if (absl::Status s = proto::ReceiveMessage(socket_.get(), deadline.get(), &message); !s.ok()) {
    return s;
  }
  if (!(message.header.flags & proto::kFlagReply)) {
    return absl::InternalError("backend sent a message without the reply flag");
  }
  return message;
}

absl::StatusOr<uint32_t> Frontend::GetVringBase(uint32_t index) {
  proto::VringState state = {index, 0};
  absl::StatusOr<uint64_t> sent = Send(proto::kGetVringBase, &state, sizeof(state), {}, false);
  if (!sent.ok()) return sent.status();
  absl::StatusOr<proto::Message> reply = Receive();
  if (!reply.ok()) return reply.status();
  const auto* result = reply->PayloadAs<proto::VringState>();
  if (result == nullptr || result->index != index) {
    return absl::InternalError("malformed GET_VRING_BASE reply");
  }
  return result->num;
}

void Frontend::WriteDesc(uint32_t index, uint32_t desc_index, const RawDesc& desc) {
  memcpy(GuestPtr(rings_[index].desc_gpa) + 16 * desc_index, &desc, sizeof(desc));
}

void Frontend::WriteAvailEntry(uint32_t index, uint16_t ahead, uint16_t head) {
  Ring& ring = rings_[index];
  const uint16_t position = static_cast<uint16_t>(ring.avail_idx + ahead) % ring.size;
  memcpy(GuestPtr(ring.avail_gpa) + 4 + 2 * position, &head, sizeof(head));
}

void Frontend::PublishHead(uint32_t index, uint16_t head, uint16_t extra_idx) {
  Ring& ring = rings_[index];
  unsigned char* avail = GuestPtr(ring.avail_gpa);
  memcpy(avail + 4 + 2 * (ring.avail_idx % ring.size), &head, sizeof(head));
  uint16_t old_idx = ring.avail_idx;
  ring.avail_idx = static_cast<uint16_t>(ring.avail_idx + 1 + extra_idx);
  __atomic_store_n(reinterpret_cast<uint16_t*>(avail + 2), ring.avail_idx, __ATOMIC_RELEASE);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  unsigned char* used = GuestPtr(ring.used_gpa);
  bool kick;
  if (options_.event_idx) {
    uint16_t avail_event;
    memcpy(&avail_event, used + 4 + 8 * ring.size, sizeof(avail_event));
    kick = NeedEvent(avail_event, ring.avail_idx, old_idx);
  } else {
    uint16_t flags = __atomic_load_n(reinterpret_cast<uint16_t*>(used), __ATOMIC_RELAXED);
    kick = (flags & vring::kUsedNoNotify) == 0;
  }
  if (kick) Kick(index);
}

void Frontend::Kick(uint32_t index) { util::SignalEventFd(rings_[index].kick.get()); }

uint16_t Frontend::used_idx(uint32_t index) const {
  return __atomic_load_n(reinterpret_cast<uint16_t*>(GuestPtr(rings_[index].used_gpa) + 2),
                         __ATOMIC_ACQUIRE);
}

bool Frontend::WaitUsedIdx(uint32_t index, uint16_t idx) {
  auto end = std::chrono::steady_clock::now() + options_.timeout;
  while (used_idx(index) != idx) {
    if (std::chrono::steady_clock::now() > end) return false;
    struct pollfd p = {rings_[index].call.get(), POLLIN, 0};
    if (poll(&p, 1, 10) > 0) util::DrainEventFd(p.fd);
  }
  return true;
}

absl::StatusOr<int> Frontend::Submit(uint32_t index, uint32_t opcode, uint64_t node_id,
                                     const void* args, size_t args_size, const void* data,
                                     size_t data_size, size_t reply_room) {
  if (index >= rings_.size()) return absl::InvalidArgumentError("no such ring");
  Ring& ring = rings_[index];
  auto free_slot = std::find(ring.busy.begin(), ring.busy.end(), false);
  if (free_slot == ring.busy.end()) return absl::ResourceExhaustedError("every slot is busy");
  const int slot = static_cast<int>(free_slot - ring.busy.begin());
  const size_t in_size = sizeof(fuse_in_header) + args_size + data_size;
  const size_t head_bytes = sizeof(fuse_in_header) + args_size;
  // Data pages start page-aligned, as Linux's page-cache and direct-I/O pages do: the request's
  // data right after its header and args, the reply's data right after its 16-byte header.
  // (A backend with O_DIRECT storage would otherwise measure its bounce-buffer path.)
  const uint64_t base = SlotGpa(ring, slot);
  const uint64_t in_gpa = RoundUp(base + kIndirectBytes + head_bytes, kPage) - head_bytes;
  const uint64_t out_gpa =
      RoundUp(in_gpa + in_size + sizeof(fuse_out_header), kPage) - sizeof(fuse_out_header);
  if (out_gpa + reply_room > base + options_.slot_buffer_bytes) {
    return absl::InvalidArgumentError("request does not fit a slot buffer");
  }
  struct fuse_in_header header = {};
  header.len = static_cast<uint32_t>(in_size);
  header.opcode = opcode;
  header.unique = next_unique_++;
  header.nodeid = node_id;
  unsigned char* in = GuestPtr(in_gpa);
  memcpy(in, &header, sizeof(header));
  if (args_size > 0) memcpy(in + sizeof(header), args, args_size);
  if (data_size > 0) memcpy(in + sizeof(header) + args_size, data, data_size);
  memset(GuestPtr(out_gpa), 0xa5, reply_room);  // so tests see what the backend did not write

  // The chain as Linux builds it: header and args, then the data (if any), then room for the
  // reply header and the reply.
  std::vector<RawDesc> chain;
  chain.push_back({in_gpa, static_cast<uint32_t>(head_bytes), 0, 0});
  if (data_size > 0) chain.push_back({in_gpa + head_bytes, static_cast<uint32_t>(data_size), 0, 0});
  if (reply_room > 0) {
    size_t header_room = std::min(reply_room, sizeof(fuse_out_header));
    chain.push_back({out_gpa, static_cast<uint32_t>(header_room), vring::kDescWrite, 0});
    if (reply_room > header_room) {
      chain.push_back({out_gpa + header_room, static_cast<uint32_t>(reply_room - header_room),
                       vring::kDescWrite, 0});
    }
  }
  const uint16_t first = static_cast<uint16_t>(slot * DescsPerSlot(ring));
  if (options_.indirect) {
    unsigned char* table = GuestPtr(base);
    for (size_t i = 0; i < chain.size(); ++i) {
      RawDesc d = chain[i];
      if (i + 1 < chain.size()) {
        d.flags |= vring::kDescNext;
        d.next = static_cast<uint16_t>(i + 1);
      }
      memcpy(table + 16 * i, &d, sizeof(d));
    }
    WriteDesc(index, first,
              {base, static_cast<uint32_t>(16 * chain.size()), vring::kDescIndirect, 0});
  } else {
    for (size_t i = 0; i < chain.size(); ++i) {
      RawDesc d = chain[i];
      if (i + 1 < chain.size()) {
        d.flags |= vring::kDescNext;
        d.next = static_cast<uint16_t>(first + i + 1);
      }
      WriteDesc(index, static_cast<uint32_t>(first + i), d);
    }
  }
  ring.busy[slot] = true;
  ring.reply_offset[slot] = out_gpa - base;
  PublishHead(index, first);
  return slot;
}

absl::StatusOr<std::vector<Completion>> Frontend::WaitCompletions(uint32_t index) {
  if (index >= rings_.size()) return absl::InvalidArgumentError("no such ring");
  Ring& ring = rings_[index];
  auto end = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    std::vector<Completion> done;
    while (ring.last_used != used_idx(index)) {
      unsigned char* entry = GuestPtr(ring.used_gpa) + 4 + 8 * (ring.last_used % ring.size);
      uint32_t id, len;
      memcpy(&id, entry, 4);
      memcpy(&len, entry + 4, 4);
      ++ring.last_used;
      int slot = static_cast<int>(id / DescsPerSlot(ring));
      if (id % DescsPerSlot(ring) != 0 || slot >= static_cast<int>(ring.busy.size()) ||
          !ring.busy[slot]) {
        return absl::InternalError(fmt::format("backend returned unknown head {}", id));
      }
      ring.busy[slot] = false;
      done.push_back({slot, len});
    }
    if (!done.empty()) return done;
    // Ask for a call once the used index moves past what we have seen, then check again.
    if (options_.event_idx) {
      unsigned char* avail = GuestPtr(ring.avail_gpa);
      memcpy(avail + 4 + 2 * ring.size, &ring.last_used, sizeof(ring.last_used));
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ring.last_used != used_idx(index)) continue;
    auto now = std::chrono::steady_clock::now();
    if (now >= end) return absl::DeadlineExceededError("no completion before the timeout");
    struct pollfd p = {ring.call.get(), POLLIN, 0};
    int wait_ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(end - now).count()) +
        1;
    if (poll(&p, 1, wait_ms) > 0) util::DrainEventFd(p.fd);
  }
}

const unsigned char* Frontend::ReplyBytes(uint32_t index, const Completion& completion) const {
  const Ring& ring = rings_[index];
  return GuestPtr(SlotGpa(ring, completion.slot) + ring.reply_offset[completion.slot]);
}

FuseReply Frontend::ReplyOf(uint32_t index, const Completion& completion) const {
  FuseReply reply;
  reply.written = completion.written;
  const unsigned char* out = ReplyBytes(index, completion);
  if (completion.written >= sizeof(fuse_out_header)) {
    memcpy(&reply.header, out, sizeof(reply.header));
    reply.payload.assign(out + sizeof(fuse_out_header), out + completion.written);
  }
  return reply;
}

absl::StatusOr<FuseReply> Frontend::Fuse(uint32_t index, uint32_t opcode, uint64_t node_id,
                                         const void* args, size_t args_size, const void* data,
                                         size_t data_size, size_t reply_room) {
  absl::StatusOr<int> slot =
      Submit(index, opcode, node_id, args, args_size, data, data_size, reply_room);
  if (!slot.ok()) return slot.status();
  absl::StatusOr<std::vector<Completion>> done = WaitCompletions(index);
  if (!done.ok()) return done.status();
  if (done->size() != 1 || (*done)[0].slot != *slot) {
    return absl::InternalError("unexpected completions for a synchronous request");
  }
  return ReplyOf(index, (*done)[0]);
}

absl::StatusOr<struct fuse_init_out> Frontend::Init() {
  struct fuse_init_in in = {};
  in.major = FUSE_KERNEL_VERSION;
  in.minor = FUSE_KERNEL_MINOR_VERSION;
  in.max_readahead = 128 * 1024;
  in.flags = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_MAX_PAGES | FUSE_INIT_EXT;
  absl::StatusOr<FuseReply> reply = Fuse(1, FUSE_INIT, 0, &in, sizeof(in));
  if (!reply.ok()) return reply.status();
  if (reply->header.error != 0) {
    return absl::InternalError(fmt::format("INIT failed: {}", reply->header.error));
  }
  struct fuse_init_out out = {};
  memcpy(&out, reply->payload.data(), std::min(sizeof(out), reply->payload.size()));
  return out;
}

}  // namespace bexd::test::vhost
