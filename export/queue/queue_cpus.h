// SPDX-License-Identifier: GPL-2.0-or-later
// Pinning queue threads to CPUs (the `queue-cpus` export option). Queue i runs on the
// (i mod n)-th CPU of the list, so a thread that serves requests stays next to the caches and,
// when the client is pinned too, next to the client it wakes.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bexd::exports {

// Parses a Linux CPU list ("0-3,8", as in /sys/devices/system/cpu/online and `taskset -c`) into
// ascending CPU numbers without duplicates.
absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text);

// The inverse of ParseCpuList for messages: {0, 1, 2, 5} -> "0-2,5".
std::string FormatCpuList(const std::vector<int>& cpus);

// The CPUs this process may run on (sched_getaffinity), ascending; empty if that cannot be asked.
std::vector<int> AllowedCpus();

// The check of an export's queue-cpus option: fails, naming the first offender and the CPUs
// allowed, unless every CPU is one this process may run on.
absl::Status CheckQueueCpus(const std::vector<int>& cpus);

// The CPU queue `index` runs on: -1 (not pinned) when `cpus` is empty.
inline int QueueCpu(const std::vector<int>& cpus, uint32_t index) {
  return cpus.empty() ? -1 : cpus[index % cpus.size()];
}

// For an export's start-up log line: " on CPUs 0-3", or nothing when not pinned.
std::string DescribeQueueCpus(const std::vector<int>& cpus);

// Restricts the calling thread to `cpu`.
absl::Status PinCurrentThread(int cpu);

}  // namespace bexd::exports
