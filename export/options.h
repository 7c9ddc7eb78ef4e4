// SPDX-License-Identifier: GPL-2.0-or-later
// Export options as parsed from --export / block-export-add (QSD's names where QSD has them).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace bexd::exports {

enum class AllowOther { kOff, kOn, kAuto };
// FUSE passthrough (docs/fuse-export.md#passthrough). kAuto: where the node and kernel allow it.
enum class PassthroughMode { kOff, kOn, kAuto };

// FUSE over io_uring (docs/fuse-export.md#fuse-over-io_uring). kAuto: when the kernel offers it
// (/sys/module/fuse/parameters/enable_uring is Y), else /dev/fuse; kOn: refuse to start without
// it; kOff: /dev/fuse only. Off unless asked for while the transport is new.
enum class IoUringMode { kOff, kOn, kAuto };

struct FuseExportOptions {
  std::string mountpoint;  // an existing regular file
  bool growable = false;
  AllowOther allow_other = AllowOther::kAuto;
  PassthroughMode passthrough = PassthroughMode::kAuto;
  uint32_t num_queues = 0;      // 0: one per CPU (per CPU of queue_cpus if given)
  std::vector<int> queue_cpus;  // queue i runs on queue_cpus[i % size]; empty: not pinned
  IoUringMode io_uring = IoUringMode::kOff;
  // Ring entries (requests in flight) per io_uring queue; the kernel has one queue per possible
  // CPU.
  uint32_t io_uring_queue_depth = 32;
};

struct VhostUserFsExportOptions {
  std::string socket_path;  // addr.type=unix, addr.path=...
  std::string tag;          // optional log label; the guest's tag is QEMU's vhost-user-fs-pci tag=
  std::string file_name;    // the image's name in the shared directory; default: the node name
  bool growable = false;
  uint32_t num_request_queues = 1;
  // Longest spin of a request queue before it sleeps (QueueThreadOptions::poll_max_ns); QEMU's
  // iothread poll-max-ns default. 0: sleep at once.
  uint64_t poll_max_ns = 32768;
  std::vector<int>
      queue_cpus;  // request queue i runs on queue_cpus[(i - 1) % size]; empty: not pinned
};

struct ExportOptions {
  std::string id;
  std::string node_name;
  bool writable = false;
  bool writethrough = false;
  std::variant<FuseExportOptions, VhostUserFsExportOptions> transport;
};

}  // namespace bexd::exports
