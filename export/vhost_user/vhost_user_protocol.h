// SPDX-License-Identifier: GPL-2.0-or-later
// The vhost-user wire format (QEMU docs/interop/vhost-user.rst): message types, flags, feature
// bits and payload layouts. Native byte order, packed as on the wire. Shared by the backend and
// the test frontend.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bexd::exports::vhost {

enum Request : uint32_t {
  kGetFeatures = 1,
  kSetFeatures = 2,
  kSetOwner = 3,
  kResetOwner = 4,
  kSetMemTable = 5,
  kSetLogBase = 6,
  kSetLogFd = 7,
  kSetVringNum = 8,
  kSetVringAddr = 9,
  kSetVringBase = 10,
  kGetVringBase = 11,
  kSetVringKick = 12,
  kSetVringCall = 13,
  kSetVringErr = 14,
  kGetProtocolFeatures = 15,
  kSetProtocolFeatures = 16,
  kGetQueueNum = 17,
  kSetVringEnable = 18,
};

inline constexpr uint32_t kVersion = 0x1;
inline constexpr uint32_t kVersionMask = 0x3;
inline constexpr uint32_t kFlagReply = 1u << 2;
inline constexpr uint32_t kFlagNeedReply = 1u << 3;

// Virtio feature bits this device speaks.
inline constexpr uint64_t kFeatureIndirectDesc = uint64_t{1} << 28;
inline constexpr uint64_t kFeatureEventIdx = uint64_t{1} << 29;
inline constexpr uint64_t kFeatureProtocolFeatures = uint64_t{1} << 30;  // vhost-user only
inline constexpr uint64_t kFeatureVersion1 = uint64_t{1} << 32;

// Protocol feature bits.
inline constexpr uint64_t kProtocolMq = uint64_t{1} << 0;
inline constexpr uint64_t kProtocolReplyAck = uint64_t{1} << 3;

// SET_VRING_KICK/CALL/ERR payload: the ring index, and this bit when no fd comes along.
inline constexpr uint64_t kVringIndexMask = 0xff;
inline constexpr uint64_t kVringNoFd = uint64_t{1} << 8;

struct Header {
  uint32_t request;
  uint32_t flags;
  uint32_t size;  // payload bytes after the header
} __attribute__((packed));

struct VringState {
  uint32_t index;
  uint32_t num;
} __attribute__((packed));

struct VringAddr {
  uint32_t index;
  uint32_t flags;
  uint64_t desc_user_addr;
  uint64_t used_user_addr;
  uint64_t avail_user_addr;
  uint64_t log_guest_addr;
} __attribute__((packed));

struct MemoryRegion {
  uint64_t guest_phys_addr;
  uint64_t memory_size;
  uint64_t userspace_addr;
  uint64_t mmap_offset;
} __attribute__((packed));

inline constexpr int kMaxMemoryRegions = 8;  // VHOST_MEMORY_BASELINE_NREGIONS

struct Memory {
  uint32_t nregions;
  uint32_t padding;
  MemoryRegion regions[kMaxMemoryRegions];
} __attribute__((packed));

// No message this device accepts has a larger payload; anything bigger is a protocol error.
inline constexpr uint32_t kMaxPayload = sizeof(Memory);
// Most file descriptors one message may carry.
inline constexpr int kMaxFds = kMaxMemoryRegions;

}  // namespace bexd::exports::vhost
