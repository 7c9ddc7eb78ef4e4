// SPDX-License-Identifier: GPL-2.0-or-later
// INIT and DESTROY: the session's start and end.
#include <linux/fuse.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "fuse/fuse_abi_ext.h"
#include "fuse/ops/ops.h"
#include "util/rate_limit.h"

namespace bexd::fuse::ops {
namespace {

constexpr uint32_t kMajor = 7;
// The protocol this core implements. Pinned rather than taken from the installed header, so that
// newer headers never make us claim behaviour we have not reviewed.
constexpr uint32_t kMinor = 38;
static_assert(FUSE_KERNEL_VERSION == kMajor && FUSE_KERNEL_MINOR_VERSION >= kMinor);
// 7.23 (Linux 3.15) is the first protocol whose INIT reply has the full fuse_init_out layout and
// whose requests carry the full argument structs; older kernels are refused.
constexpr uint32_t kMinimumMinor = 23;
// The kernel's default of 12 background requests throttles asynchronous direct I/O with several
// jobs (docs/fuse-core.md#init has the measurement); 64 keeps a QD16 x 4 load moving.
constexpr uint16_t kMaxBackground = 64;
constexpr uint16_t kCongestionThreshold = kMaxBackground * 3 / 4;
constexpr uint32_t kPageSize = 4096;
// fuse_init_out.max_stack_depth (7.40) when passthrough is taken: the kernel refuses a backing
// file whose file system is at least this deep (ELOOP), so 2, the kernel's limit
// (FILESYSTEM_MAX_STACK_DEPTH), lets an image on overlayfs (a container's root) be one. Nothing can
// stack on the mount then, which nothing needs of a single-file export.
constexpr uint32_t kMaxStackDepth = 2;

}  // namespace

Answer Init(Call& call) {
  Session& session = call.session();
  // Kernels before 7.36 send the 16 bytes up to `flags`; the rest then reads as zero.
  const size_t arg_bytes = call.args().remaining();
  const auto in = call.args().Read<struct fuse_init_in>();

  if (in.major > kMajor) {
    // The kernel retries INIT with the major version named in this short reply.
    const uint32_t ours[2] = {kMajor, kMinor};
    return call.Reply(ours, sizeof(ours));
  }
  if (in.major < kMajor || in.minor < kMinimumMinor) {
    static log::RateLimit refused;  // a guest may send refused INITs in a loop
    log::Limited(refused, log::Level::kWarn, "FUSE INIT: kernel protocol {}.{} is older than {}.{}",
                 in.major, in.minor, kMajor, kMinimumMinor);
    return Answer::Error(EPROTO);
  }

  uint64_t offered = in.flags;
  if ((in.flags & FUSE_INIT_EXT) && arg_bytes >= offsetof(struct fuse_init_in, flags2) + 4) {
    offered |= uint64_t{in.flags2} << 32;
  }
  // Only what this core honours: reads and direct I/O may be in flight concurrently, writes and
  // reads up to max_write, shared mmap() of the direct-I/O file, and O_TRUNC handled by OPEN
  // (without it the kernel truncates through SETATTR, which cannot be told from `truncate`).
  // Directory operations (lookups in the one-entry root) need no serialisation.
  uint64_t wanted = FUSE_ASYNC_READ | FUSE_ASYNC_DIO | FUSE_ATOMIC_O_TRUNC | FUSE_BIG_WRITES |
                    FUSE_MAX_PAGES | FUSE_INIT_EXT | abi::kDirectIoAllowMmap;
  if (session.options().directory_root) wanted |= FUSE_PARALLEL_DIROPS | FUSE_DO_READDIRPLUS;
  Passthrough* passthrough = session.passthrough();
  if (passthrough != nullptr) wanted |= abi::kPassthrough;
  if (session.io_uring_enabled()) wanted |= abi::kOverIoUring;
  const uint64_t accepted = wanted & offered;

  struct fuse_init_out out;
  std::memset(&out, 0, sizeof(out));
  out.major = kMajor;
  out.minor = std::min(in.minor, kMinor);
  out.max_readahead = in.max_readahead;
  out.flags = static_cast<uint32_t>(accepted);
  out.flags2 = static_cast<uint32_t>(accepted >> 32);
  out.max_background = kMaxBackground;
  out.congestion_threshold = kCongestionThreshold;
  out.max_write = session.options().max_write;
  out.time_gran = 1;
  out.max_pages = static_cast<uint16_t>(session.options().max_write / kPageSize);
  if (accepted & abi::kPassthrough) out.unused[0] = kMaxStackDepth;  // max_stack_depth
  if (passthrough != nullptr) passthrough->SetNegotiated(accepted & abi::kPassthrough);

  session.MarkInitialized(out.minor, (accepted & abi::kOverIoUring) != 0);
  static log::RateLimit initialized;  // a guest may repeat INIT too
  log::Limited(
      initialized, log::Level::kInfo,
      "FUSE session on node '{}': protocol {}.{} (kernel {}.{}), flags {:#x}, max_write {}",
      session.node().node_name(), out.major, out.minor, in.major, in.minor, accepted,
      out.max_write);
  return call.Reply(out);
}

Answer Destroy(Call& call) {
  call.session().MarkDestroyed();
  return Answer::Empty();
}

}  // namespace bexd::fuse::ops
