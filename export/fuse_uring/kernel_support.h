// SPDX-License-Identifier: GPL-2.0-or-later
// What the kernel says about FUSE over io_uring before a mount: whether its switch is on, and how
// many ring queues it will expect (one per possible CPU). bexd only reads the switch; enabling it
// is the administrator's choice (scripts/setup.sh does it for the demo and the tests, and says
// so).
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <string>

namespace bexd::exports {

inline constexpr char kFuseUringSwitch[] = "/sys/module/fuse/parameters/enable_uring";

struct FuseUringSupport {
  bool enabled = false;  // the switch is Y: INIT will offer FUSE_OVER_IO_URING
  // When not: why, naming the switch ("FUSE over io_uring is disabled:
  // /sys/module/fuse/parameters/enable_uring is N"), and what would change it.
  std::string why_not;
  std::string remedy;
};

// Reads the switch (`path`: the switch's file, for tests). The kernel offers FUSE_OVER_IO_URING in
// INIT only while it is Y.
FuseUringSupport ReadFuseUringSupport(const std::string& path = kFuseUringSwitch);

// The number of possible CPUs (/sys/devices/system/cpu/possible): the kernel makes one ring queue
// for each, and a request goes to the queue of the CPU that issued it.
absl::StatusOr<uint32_t> PossibleCpuCount();

}  // namespace bexd::exports
