// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/vhost_user/vhost_user_device.h"

#include <fcntl.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::exports {
namespace {

using vhost::Message;

absl::Status Invalid(const std::string& what) { return absl::InvalidArgumentError(what); }

const char* RequestName(uint32_t request) {
  switch (request) {
    case vhost::kGetFeatures:
      return "GET_FEATURES";
    case vhost::kSetFeatures:
      return "SET_FEATURES";
    case vhost::kSetOwner:
      return "SET_OWNER";
    case vhost::kResetOwner:
      return "RESET_OWNER";
    case vhost::kSetMemTable:
      return "SET_MEM_TABLE";
    case vhost::kSetLogBase:
      return "SET_LOG_BASE";
    case vhost::kSetLogFd:
      return "SET_LOG_FD";
    case vhost::kSetVringNum:
      return "SET_VRING_NUM";
    case vhost::kSetVringAddr:
      return "SET_VRING_ADDR";
    case vhost::kSetVringBase:
      return "SET_VRING_BASE";
    case vhost::kGetVringBase:
      return "GET_VRING_BASE";
    case vhost::kSetVringKick:
      return "SET_VRING_KICK";
    case vhost::kSetVringCall:
      return "SET_VRING_CALL";
    case vhost::kSetVringErr:
      return "SET_VRING_ERR";
    case vhost::kGetProtocolFeatures:
      return "GET_PROTOCOL_FEATURES";
    case vhost::kSetProtocolFeatures:
      return "SET_PROTOCOL_FEATURES";
    case vhost::kGetQueueNum:
      return "GET_QUEUE_NUM";
    case vhost::kSetVringEnable:
      return "SET_VRING_ENABLE";
    default:
      return "unknown";
  }
}

// Messages whose answer is their own reply, never a REPLY_ACK.
bool HasOwnReply(uint32_t request) {
  return request == vhost::kGetFeatures || request == vhost::kGetProtocolFeatures ||
         request == vhost::kGetVringBase || request == vhost::kGetQueueNum;
}

// File descriptors each message must carry (SET_MEM_TABLE and SET_VRING_* are checked where
// they are handled).
bool TakesNoFds(uint32_t request) {
  return request != vhost::kSetMemTable && request != vhost::kSetVringKick &&
         request != vhost::kSetVringCall && request != vhost::kSetVringErr;
}

template <typename T>
void SetReply(uint32_t request, const T& value, VhostUserDevice::Reply* reply) {
  static_assert(sizeof(T) <= sizeof(reply->payload));
  reply->send = true;
  reply->header = {request, vhost::kVersion | vhost::kFlagReply, sizeof(T)};
  memcpy(reply->payload, &value, sizeof(T));
}

}  // namespace

VhostUserDevice::VhostUserDevice(std::string name, std::vector<VringQueue*> queues,
                                 std::function<void()> on_reset)
    : name_(std::move(name)),
      queues_(std::move(queues)),
      on_reset_(std::move(on_reset)),
      vrings_(queues_.size()) {}

VhostUserDevice::~VhostUserDevice() { Reset(); }

void VhostUserDevice::Reset() {
  for (uint32_t i = 0; i < vrings_.size(); ++i) StopRing(i);
  vrings_.clear();
  vrings_.resize(queues_.size());
  memory_.reset();
  features_ = 0;
  features_set_ = false;
  protocol_features_ = 0;
  if (on_reset_) on_reset_();
}

absl::Status VhostUserDevice::Handle(Message& message, Reply* reply) {
  reply->send = false;
  const uint32_t request = message.header.request;
  absl::Status status = Dispatch(message, reply);
  log::Debug("{}: {} ({}): {}", name_, RequestName(request), request,
             status.ok() ? std::string("ok") : std::string(status.message()));
  // REPLY_ACK: the frontend asked for an explicit result of a message that has no reply.
  bool ack = (message.header.flags & vhost::kFlagNeedReply) &&
             (protocol_features_ & vhost::kProtocolReplyAck) && !HasOwnReply(request);
  if (ack) SetReply(request, uint64_t{status.ok() ? 0u : 1u}, reply);
  if (!status.ok()) {
    return absl::Status(status.code(), fmt::format("{}: {}: {}", name_, RequestName(request),
                                                   std::string(status.message())));
  }
  return absl::OkStatus();
}

absl::Status VhostUserDevice::Dispatch(Message& message, Reply* reply) {
  const uint32_t request = message.header.request;
  if (TakesNoFds(request) && !message.fds.empty()) {
    return Invalid(fmt::format("carries {} unexpected file descriptors", message.fds.size()));
  }
  auto need_size = [&](size_t size) {
    return message.header.size == size ? absl::OkStatus()
                                       : Invalid(fmt::format("payload is {} bytes, expected {}",
                                                             +message.header.size, size));
  };
  uint64_t u64 = 0;
  if (message.header.size == sizeof(u64)) memcpy(&u64, message.payload, sizeof(u64));

  switch (request) {
    case vhost::kGetFeatures:
      if (absl::Status s = need_size(0); !s.ok()) return s;
      SetReply(request, kFeatures, reply);
      return absl::OkStatus();
    case vhost::kSetFeatures:
      if (absl::Status s = need_size(sizeof(u64)); !s.ok()) return s;
      return SetFeatures(u64);
    case vhost::kGetProtocolFeatures:
      if (absl::Status s = need_size(0); !s.ok()) return s;
      SetReply(request, kProtocolFeatures, reply);
      return absl::OkStatus();
    case vhost::kSetProtocolFeatures:
      if (absl::Status s = need_size(sizeof(u64)); !s.ok()) return s;
      if (u64 & ~kProtocolFeatures) {
        return Invalid(
            fmt::format("protocol features 0x{:x} were not offered", u64 & ~kProtocolFeatures));
      }
      protocol_features_ = u64;
      return absl::OkStatus();
    case vhost::kGetQueueNum:
      if (absl::Status s = need_size(0); !s.ok()) return s;
      SetReply(request, uint64_t{queues_.size()}, reply);
      return absl::OkStatus();
    case vhost::kSetOwner:
      return need_size(0);
    case vhost::kResetOwner: {
      if (absl::Status s = need_size(0); !s.ok()) return s;
      uint64_t protocol_features = protocol_features_;
      Reset();
      protocol_features_ = protocol_features;  // keep REPLY_ACK for this very message
      return absl::OkStatus();
    }
    case vhost::kSetMemTable:
      return SetMemTable(message);
    case vhost::kSetVringNum: {
      absl::StatusOr<vhost::VringState> state = RingPayload<vhost::VringState>(message);
      if (!state.ok()) return state.status();
      if (!Virtqueue::IsValidSize(state->num)) {
        return Invalid(fmt::format("vring {} size {} is not a power of two in [1, {}]",
                                   +state->index, +state->num, Virtqueue::kMaxSize));
      }
      return Reconfigure(state->index, [&](Vring& vring) { vring.num = state->num; });
    }
    case vhost::kSetVringAddr: {
      absl::StatusOr<vhost::VringAddr> addr = RingPayload<vhost::VringAddr>(message);
      if (!addr.ok()) return addr.status();
      return Reconfigure(addr->index, [&](Vring& vring) {
        vring.have_addr = true;
        vring.desc_addr = addr->desc_user_addr;
        vring.avail_addr = addr->avail_user_addr;
        vring.used_addr = addr->used_user_addr;
      });
    }
    case vhost::kSetVringBase: {
      absl::StatusOr<vhost::VringState> state = RingPayload<vhost::VringState>(message);
      if (!state.ok()) return state.status();
      if (state->num > UINT16_MAX) {
        return Invalid(fmt::format("vring {} base {} exceeds 65535", +state->index, +state->num));
      }
      return Reconfigure(state->index,
                         [&](Vring& vring) { vring.base = static_cast<uint16_t>(state->num); });
    }
    case vhost::kGetVringBase: {
      absl::StatusOr<vhost::VringState> state = RingPayload<vhost::VringState>(message);
      if (!state.ok()) return state.status();
      StopRing(state->index);
      // The ring is stopped until the next SET_VRING_KICK.
      vrings_[state->index].kick.Reset();
      SetReply(request, vhost::VringState{state->index, vrings_[state->index].base}, reply);
      return absl::OkStatus();
    }
    case vhost::kSetVringKick:
    case vhost::kSetVringCall:
    case vhost::kSetVringErr:
      return SetVringFd(message);
    case vhost::kSetVringEnable: {
      absl::StatusOr<vhost::VringState> state = RingPayload<vhost::VringState>(message);
      if (!state.ok()) return state.status();
      if (!protocol_features_acked()) {
        return Invalid("sent without VHOST_USER_F_PROTOCOL_FEATURES negotiated");
      }
      if (state->num > 1) return Invalid(fmt::format("enable value {}", +state->num));
      return Reconfigure(state->index, [&](Vring& vring) { vring.enabled = state->num == 1; });
    }
    default:
      return absl::UnimplementedError("message type not supported");
  }
}

absl::Status VhostUserDevice::SetFeatures(uint64_t features) {
  if (features & ~kFeatures) {
    return Invalid(fmt::format("features 0x{:x} were not offered", features & ~kFeatures));
  }
  // Rings pick up EVENT_IDX/INDIRECT_DESC when they start; restart any that run.
  for (uint32_t i = 0; i < vrings_.size(); ++i) StopRing(i);
  features_ = features;
  features_set_ = true;
  // Without protocol features there is no SET_VRING_ENABLE: rings are enabled from the start.
  if (!protocol_features_acked()) {
    for (Vring& vring : vrings_) vring.enabled = true;
  }
  return StartReadyRings();
}

absl::Status VhostUserDevice::SetMemTable(Message& message) {
  if (message.header.size < 2 * sizeof(uint32_t)) return Invalid("payload too short");
  uint32_t count;
  memcpy(&count, message.payload, sizeof(count));
  if (count == 0 || count > vhost::kMaxMemoryRegions) {
    return Invalid(fmt::format("{} regions, expected 1 to {}", count, vhost::kMaxMemoryRegions));
  }
  // QEMU sends the full table; a shorter payload that still covers every region is accepted.
  size_t needed = 2 * sizeof(uint32_t) + count * sizeof(vhost::MemoryRegion);
  if (message.header.size < needed) {
    return Invalid(
        fmt::format("payload of {} bytes cannot hold {} regions", +message.header.size, count));
  }
  if (message.fds.size() != count) {
    return Invalid(fmt::format("{} regions but {} file descriptors", count, message.fds.size()));
  }
  std::vector<GuestMemoryRegionSpec> specs(count);
  std::vector<int> fds(count);
  for (uint32_t i = 0; i < count; ++i) {
    vhost::MemoryRegion r;
    memcpy(&r, message.payload + 2 * sizeof(uint32_t) + i * sizeof(r), sizeof(r));
    specs[i] = {r.guest_phys_addr, r.memory_size, r.userspace_addr, r.mmap_offset};
    fds[i] = message.fds[i].get();
  }
  absl::StatusOr<std::unique_ptr<GuestMemory>> memory = GuestMemory::Map(specs, fds);
  if (!memory.ok()) return memory.status();
  // Queue threads hold pointers into the old table: stop them before it goes away. The old table
  // stays mapped until every ring that ran on it runs on the new one; if one cannot (a ring
  // outside the new table), the message is refused and the old table serves as before.
  for (uint32_t i = 0; i < vrings_.size(); ++i) StopRing(i);
  std::unique_ptr<GuestMemory> previous = std::exchange(memory_, std::move(*memory));
  if (absl::Status started = StartReadyRings(); !started.ok()) {
    for (uint32_t i = 0; i < vrings_.size(); ++i) StopRing(i);
    memory_ = std::move(previous);
    StartReadyRings().IgnoreError();  // the rings that ran before the message run again
    return absl::Status(started.code(), fmt::format("refused, the previous table stays: {}",
                                                    std::string(started.message())));
  }
  static log::RateLimit mapped_limit;
  log::Limited(mapped_limit, log::Level::kInfo, "{}: guest memory mapped ({} regions)", name_,
               memory_->region_count());
  return absl::OkStatus();
}

absl::Status VhostUserDevice::StartReadyRings() {
  absl::Status result;
  for (uint32_t i = 0; i < vrings_.size(); ++i) {
    if (absl::Status s = StartRingIfReady(i); !s.ok() && result.ok()) result = s;
  }
  return result;
}

template <typename T>
absl::StatusOr<T> VhostUserDevice::RingPayload(const Message& message) const {
  const T* payload = message.PayloadAs<T>();
  if (payload == nullptr) {
    return Invalid(fmt::format("payload is {} bytes, expected {}", message.header.size, sizeof(T)));
  }
  if (absl::Status s = CheckIndex(payload->index); !s.ok()) return s;
  return *payload;
}

absl::Status VhostUserDevice::CheckIndex(uint32_t index) const {
  if (index >= vrings_.size()) {
    return Invalid(fmt::format("vring index {}, the device has {}", index, vrings_.size()));
  }
  return absl::OkStatus();
}

absl::Status VhostUserDevice::SetVringFd(Message& message) {
  const uint32_t request = message.header.request;
  if (message.header.size != sizeof(uint64_t)) {
    return Invalid(fmt::format("payload is {} bytes, expected 8", +message.header.size));
  }
  uint64_t value;
  memcpy(&value, message.payload, sizeof(value));
  if (value & ~(vhost::kVringIndexMask | vhost::kVringNoFd)) {
    return Invalid(fmt::format("unknown bits in 0x{:x}", value));
  }
  uint32_t index = static_cast<uint32_t>(value & vhost::kVringIndexMask);
  if (absl::Status s = CheckIndex(index); !s.ok()) return s;
  bool no_fd = (value & vhost::kVringNoFd) != 0;
  if (message.fds.size() != (no_fd ? 0u : 1u)) {
    return Invalid(
        fmt::format("{} file descriptors, expected {}", message.fds.size(), no_fd ? 0 : 1));
  }
  if (request == vhost::kSetVringKick && no_fd) {
    return absl::UnimplementedError("polling a ring without a kick fd is not supported");
  }
  util::UniqueFd fd;
  if (!no_fd) {
    fd = std::move(message.fds[0]);
    // Never block a queue thread on a kick read or a call write.
    int flags = fcntl(fd.get(), F_GETFL);
    if (flags < 0 || fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
      return Invalid(fmt::format("fd for vring {}: fcntl: {}", index, strerror(errno)));
    }
  }
  // Reconfigure() stops the ring first: its thread lets go of the old fd before it is closed.
  return Reconfigure(index, [&](Vring& vring) {
    util::UniqueFd& slot = request == vhost::kSetVringKick   ? vring.kick
                           : request == vhost::kSetVringCall ? vring.call
                                                             : vring.err;
    slot = std::move(fd);
  });
}

absl::Status VhostUserDevice::Reconfigure(uint32_t index,
                                          const std::function<void(Vring&)>& change) {
  StopRing(index);
  change(vrings_[index]);
  return StartRingIfReady(index);
}

bool VhostUserDevice::StopRing(uint32_t index) {
  if (!queues_[index]->running()) return false;
  vrings_[index].base = queues_[index]->Stop();
  // A kick fd that hung up would hang up again at once: the ring waits for a new one.
  if (queues_[index]->kick_lost()) vrings_[index].kick.Reset();
  return true;
}

absl::Status VhostUserDevice::StartRingIfReady(uint32_t index) {
  Vring& vring = vrings_[index];
  if (queues_[index]->running() || !vring.kick || !vring.enabled || !memory_ || !vring.have_addr ||
      vring.num == 0 || !features_set_) {
    return absl::OkStatus();
  }
  VringRun run;
  run.layout = {vring.num,
                vring.desc_addr,
                vring.avail_addr,
                vring.used_addr,
                vring.base,
                (features_ & vhost::kFeatureEventIdx) != 0,
                (features_ & vhost::kFeatureIndirectDesc) != 0};
  run.memory = memory_.get();
  run.kick_fd = vring.kick.get();
  run.call_fd = vring.call.get();
  run.err_fd = vring.err.get();
  return queues_[index]->Start(run);
}

}  // namespace bexd::exports
