// INIT, DESTROY, STATFS and the requests that take no reply.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "fuse/fuse_abi_ext.h"
#include "fuse/queue.h"
#include "util/rate_limit.h"

namespace bexd::fuse {
namespace {

constexpr uint32_t kMajor = 7;
// The protocol this core implements. Pinned rather than taken from the installed header, so that
// newer headers never make us claim behaviour we have not reviewed.
constexpr uint32_t kMinor = 38;
static_assert(FUSE_KERNEL_VERSION == kMajor && FUSE_KERNEL_MINOR_VERSION >= kMinor);
// 7.23 (Linux 3.15) is the first protocol whose INIT reply has the full fuse_init_out layout and
// whose requests carry the full argument structs; older kernels are refused.
constexpr uint32_t kMinimumMinor = 23;
// The kernel's default of 12 background requests throttles asynchronous direct I/O (it cost about
// a third of the throughput at 4 jobs); 64 keeps a QD16 x 4 load moving.
constexpr uint16_t kMaxBackground = 64;
constexpr uint16_t kCongestionThreshold = kMaxBackground * 3 / 4;
constexpr uint32_t kPageSize = 4096;
constexpr size_t kPreExtendedInitBytes = 16;  // fuse_init_in before 7.36: major..flags

}  // namespace

void Queue::HandleInit(Request* request, const Header& header) {
  struct fuse_init_in in;
  std::memset(&in, 0, sizeof(in));
  if (header.arg_bytes < kPreExtendedInitBytes) {
    ReplyError(request, EINVAL);
    return;
  }
  const size_t copied = std::min(header.arg_bytes, sizeof(in));
  CopyFromIn(request, sizeof(struct fuse_in_header), &in, copied);

  if (in.major > kMajor) {
    // The kernel retries INIT with the major version named in this short reply.
    const uint32_t ours[2] = {kMajor, kMinor};
    Reply(request, ours, sizeof(ours));
    return;
  }
  if (in.major < kMajor || in.minor < kMinimumMinor) {
    static log::RateLimit refused;  // a guest may send refused INITs in a loop
    log::Limited(refused, log::Level::kWarn, "FUSE INIT: kernel protocol {}.{} is older than {}.{}",
                 in.major, in.minor, kMajor, kMinimumMinor);
    ReplyError(request, EPROTO);
    return;
  }

  uint64_t offered = in.flags;
  if ((in.flags & FUSE_INIT_EXT) && copied >= offsetof(struct fuse_init_in, flags2) + 4) {
    offered |= uint64_t{in.flags2} << 32;
  }
  // Only what this core honours: reads and direct I/O may be in flight concurrently, writes and
  // reads up to max_write, shared mmap() of the direct-I/O file, and O_TRUNC handled by OPEN
  // (without it the kernel truncates through SETATTR, which cannot be told from `truncate`).
  // Directory operations (lookups in the one-entry root) need no serialisation.
  uint64_t wanted = FUSE_ASYNC_READ | FUSE_ASYNC_DIO | FUSE_ATOMIC_O_TRUNC | FUSE_BIG_WRITES |
                    FUSE_MAX_PAGES | FUSE_INIT_EXT | abi::kDirectIoAllowMmap;
  if (session_->options().directory_root) wanted |= FUSE_PARALLEL_DIROPS | FUSE_DO_READDIRPLUS;
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
  out.max_write = session_->options().max_write;
  out.time_gran = 1;
  out.max_pages = static_cast<uint16_t>(session_->options().max_write / kPageSize);
  if (!RequireReplyRoom(request, sizeof(out))) return;

  session_->MarkInitialized(out.minor);
  static log::RateLimit initialized;  // a guest may repeat INIT too
  log::Limited(
      initialized, log::Level::kInfo,
      "FUSE session on node '{}': protocol {}.{} (kernel {}.{}), flags {:#x}, max_write {}",
      session_->node().node_name(), out.major, out.minor, in.major, in.minor, accepted,
      out.max_write);
  Reply(request, out);
}

void Queue::HandleDestroy(Request* request, const Header& header) {
  session_->MarkDestroyed();
  Reply(request, nullptr, 0);
}

void Queue::HandleStatfs(Request* request, const Header& header) {
  if (session_->KindOf(header.node_id) == NodeKind::kNone) {
    ReplyError(request, ENOENT);
    return;
  }
  struct fuse_statfs_out out;
  std::memset(&out, 0, sizeof(out));
  const uint64_t size = session_->node().size();
  out.st.bsize = kPageSize;
  out.st.frsize = kPageSize;
  out.st.blocks = size / kPageSize + (size % kPageSize != 0);
  out.st.files = session_->options().directory_root ? 2 : 1;
  out.st.namelen = 255;
  Reply(request, out);
}

void Queue::HandleNoReply(Request* request, const Header& header) {
  size_t needed = 0;
  switch (header.opcode) {
    case FUSE_FORGET:
      needed = sizeof(struct fuse_forget_in);
      break;
    case FUSE_INTERRUPT:
      // Requests in flight are block I/O that cannot be recalled; they complete normally.
      needed = sizeof(struct fuse_interrupt_in);
      break;
    case FUSE_BATCH_FORGET: {
      struct fuse_batch_forget_in in;
      needed = sizeof(in);
      if (header.arg_bytes < needed) break;
      CopyFromIn(request, sizeof(struct fuse_in_header), &in, sizeof(in));
      needed += uint64_t{in.count} * sizeof(struct fuse_forget_one);
      if (needed != header.arg_bytes) {
        static log::RateLimit mismatched;
        log::Limited(mismatched, log::Level::kDebug,
                     "FUSE BATCH_FORGET of {} nodes in {} argument bytes", in.count,
                     header.arg_bytes);
        Finish(request, -EINVAL, true);
        return;
      }
      break;
    }
    default:  // NOTIFY_REPLY answers a retrieve this core never sends
      break;
  }
  // Nodes are never created or dropped, so lookup counts need no tracking.
  if (header.arg_bytes < needed) {
    Finish(request, -EINVAL, true);
    return;
  }
  Finish(request, 0, false);
}

}  // namespace bexd::fuse
