// SPDX-License-Identifier: GPL-2.0-or-later
#include "perf/responder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/log.h"

namespace bexd::perf {
namespace {

constexpr uint64_t kRootNodeId = FUSE_ROOT_ID;
constexpr uint32_t kPageSize = 4096;
// Protocol 7.31 (Linux 4.20) brought max_pages; older kernels would cap requests at 128 KiB.
constexpr uint32_t kMinKernelMinor = 31;
constexpr uint32_t kInitFlagsWanted =
    FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_ASYNC_DIO | FUSE_MAX_PAGES;
// Direct I/O keeps the page cache out of the measurement; parallel direct writes stop the kernel
// from serializing concurrent writers on the inode lock.
constexpr uint32_t kOpenFlags = FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES;

// Copies a fixed-size argument out of the request; false if the request is too short for it.
template <typename T>
bool ReadArg(std::span<const std::byte> arg, T* out) {
  if (arg.size() < sizeof(T)) return false;
  std::memcpy(out, arg.data(), sizeof(T));
  return true;
}

void SetError(const fuse_in_header& in, int error, Reply& reply) {
  reply.header = {.len = sizeof(fuse_out_header), .error = -error, .unique = in.unique};
  reply.iov[0] = {&reply.header, sizeof(fuse_out_header)};
  reply.iov_count = 1;
}

// A successful reply whose argument is `arg_size` bytes of reply.arg (0: header only).
void SetOk(const fuse_in_header& in, size_t arg_size, Reply& reply) {
  reply.header = {.len = static_cast<uint32_t>(sizeof(fuse_out_header) + arg_size),
                  .error = 0,
                  .unique = in.unique};
  reply.iov[0] = {&reply.header, sizeof(fuse_out_header)};
  reply.iov[1] = {&reply.arg, arg_size};
  reply.iov_count = arg_size == 0 ? 1 : 2;
}

}  // namespace

Responder::Responder(const ResponderConfig& config) : config_(config), zeroes_(config.max_write) {}

size_t Responder::RequestBufferSize() const {
  // A WRITE carries max_write bytes after its headers; the kernel wants a page of room for those.
  return std::max<size_t>(FUSE_MIN_READ_BUFFER, config_.max_write + kPageSize);
}

void Responder::Answer(std::span<const std::byte> request, Reply& reply) const {
  fuse_in_header in;
  if (!ReadArg(request, &in) || in.len != request.size()) {
    // Without a trustworthy header there is no `unique` to answer to; the kernel never sends this.
    log::Error("dropping a malformed request of {} bytes", request.size());
    reply.iov_count = 0;
    return;
  }
  const std::span<const std::byte> arg = request.subspan(sizeof(fuse_in_header));
  switch (in.opcode) {
    case FUSE_INIT:
      return AnswerInit(in, arg, reply);
    case FUSE_GETATTR:
      return AnswerGetattr(in, reply);
    case FUSE_OPEN:
      return AnswerOpen(in, reply);
    case FUSE_READ:
      return AnswerRead(in, arg, reply);
    case FUSE_WRITE:
      return AnswerWrite(in, arg, reply);
    case FUSE_FLUSH:
    case FUSE_RELEASE:
    case FUSE_FSYNC:
    case FUSE_DESTROY:
      return SetOk(in, 0, reply);
    case FUSE_FORGET:
    case FUSE_BATCH_FORGET:
    case FUSE_INTERRUPT:
      // No reply expected; every request is answered at once, so there is nothing to interrupt.
      reply.iov_count = 0;
      return;
    default:
      return SetError(in, ENOSYS, reply);
  }
}

void Responder::AnswerInit(const fuse_in_header& in, std::span<const std::byte> arg,
                           Reply& reply) const {
  // Kernels before 7.36 send only the first four fields; the rest stay zero.
  fuse_init_in init{};
  if (arg.size() < offsetof(fuse_init_in, flags2)) {
    log::Error("INIT argument is {} bytes, too short", arg.size());
    return SetError(in, EINVAL, reply);
  }
  std::memcpy(&init, arg.data(), std::min(arg.size(), sizeof(init)));
  if (init.major != FUSE_KERNEL_VERSION || init.minor < kMinKernelMinor) {
    log::Error("kernel FUSE protocol {}.{} is not supported (need {}.{} or newer)", init.major,
               init.minor, FUSE_KERNEL_VERSION, kMinKernelMinor);
    return SetError(in, EPROTO, reply);
  }
  fuse_init_out& out = reply.arg.init;
  out = {};
  out.major = FUSE_KERNEL_VERSION;
  out.minor = FUSE_KERNEL_MINOR_VERSION;
  out.max_readahead = init.max_readahead;
  out.flags = init.flags & kInitFlagsWanted;
  out.max_background = config_.max_background;
  out.congestion_threshold = static_cast<uint16_t>(config_.max_background * 3 / 4);
  out.max_write = config_.max_write;
  out.time_gran = 1;
  out.max_pages = static_cast<uint16_t>(config_.max_write / kPageSize);
  log::Info("INIT: kernel protocol {}.{}, flags {:#x} of wanted {:#x}, max_background {}",
            init.major, init.minor, out.flags, kInitFlagsWanted, out.max_background);
  SetOk(in, sizeof(fuse_init_out), reply);
}

void Responder::AnswerGetattr(const fuse_in_header& in, Reply& reply) const {
  if (in.nodeid != kRootNodeId) return SetError(in, ENOENT, reply);
  fuse_attr_out& out = reply.arg.attr;
  out = {};
  out.attr_valid = 1;
  out.attr.ino = kRootNodeId;
  out.attr.size = config_.file_size;
  out.attr.blocks = (config_.file_size + 511) / 512;
  out.attr.mode = S_IFREG | 0644;
  out.attr.nlink = 1;
  out.attr.uid = getuid();
  out.attr.gid = getgid();
  out.attr.blksize = kPageSize;
  SetOk(in, sizeof(fuse_attr_out), reply);
}

void Responder::AnswerOpen(const fuse_in_header& in, Reply& reply) const {
  if (in.nodeid != kRootNodeId) return SetError(in, ENOENT, reply);
  reply.arg.open = {.fh = 0, .open_flags = kOpenFlags, .padding = 0};
  SetOk(in, sizeof(fuse_open_out), reply);
}

void Responder::AnswerRead(const fuse_in_header& in, std::span<const std::byte> arg,
                           Reply& reply) const {
  fuse_read_in read;
  if (!ReadArg(arg, &read)) return SetError(in, EINVAL, reply);
  const uint64_t length = read.offset >= config_.file_size
                              ? 0
                              : std::min<uint64_t>(read.size, config_.file_size - read.offset);
  if (length > zeroes_.size()) return SetError(in, EINVAL, reply);
  reply.header = {.len = static_cast<uint32_t>(sizeof(fuse_out_header) + length),
                  .error = 0,
                  .unique = in.unique};
  reply.iov[0] = {&reply.header, sizeof(fuse_out_header)};
  // writev(2) only reads from the buffer; the cast drops a const that iovec cannot express.
  reply.iov[1] = {const_cast<std::byte*>(zeroes_.data()), length};
  reply.iov_count = 2;
}

void Responder::AnswerWrite(const fuse_in_header& in, std::span<const std::byte> arg,
                            Reply& reply) const {
  fuse_write_in write;
  if (!ReadArg(arg, &write) || arg.size() - sizeof(write) < write.size) {
    return SetError(in, EINVAL, reply);
  }
  if (write.offset > config_.file_size || write.size > config_.file_size - write.offset) {
    return SetError(in, ENOSPC, reply);
  }
  reply.arg.write = {.size = write.size, .padding = 0};
  SetOk(in, sizeof(fuse_write_out), reply);
}

}  // namespace bexd::perf
