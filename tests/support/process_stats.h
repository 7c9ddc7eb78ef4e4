// SPDX-License-Identifier: GPL-2.0-or-later
// What /proc says about a process, for tests that bound the daemon's memory and CPU use.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace bexd::testing {

// A "Vm..." line of /proc/PID/status in KiB (VmRSS: resident now, VmHWM: the peak so far); -1 if
// the process is gone.
inline int64_t StatusKb(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with(field + ":")) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// Seconds the process's main thread has been running or waiting to run (from
// /proc/PID/schedstat). A thread that spins is busy all the time however loaded the machine is,
// where its CPU time would shrink with its share of the CPUs; an idle one is busy next to never.
inline double BusySeconds(pid_t pid) {
  std::ifstream schedstat("/proc/" + std::to_string(pid) + "/schedstat");
  uint64_t running_ns = 0, waiting_ns = 0;
  schedstat >> running_ns >> waiting_ns;
  return static_cast<double>(running_ns + waiting_ns) / 1e9;
}

// Descriptors the process has open now.
inline int OpenDescriptors(pid_t pid) {
  int count = 0;
  std::error_code ignored;
  for (auto it =
           std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ignored);
       it != std::filesystem::directory_iterator(); ++it) {
    ++count;
  }
  return count;
}

// The lowest descriptor number the process has free: with RLIMIT_NOFILE set to it, the process
// can open nothing new until it closes something.
inline int LowestFreeDescriptor(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd/";
  int fd = 0;
  std::error_code ignored;
  while (std::filesystem::is_symlink(dir + std::to_string(fd), ignored)) ++fd;
  return fd;
}

}  // namespace bexd::testing
