// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/nbd/nbd_handle.h"

#include <fmt/format.h>
#include <poll.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "block/nbd/nbd_api.h"

namespace bexd::block {
namespace {

// libnbd's message for the last call of this thread that failed.
std::string LastError(std::string_view fallback) {
  const char* error = Nbd().nbd_get_error();
  return error != nullptr && *error != '\0' ? std::string(error) : std::string(fallback);
}

// TLS required (a server that does not offer it is refused, as QEMU with tls-creds), with the
// credentials' files.
bool SetUpTls(nbd_handle* h, const TlsCredentials& tls) {
  if (Nbd().nbd_set_tls(h, LIBNBD_TLS_REQUIRE) == -1) return false;
  if (tls.kind == TlsCredentials::Kind::kPsk) {
    const std::string keys = tls.dir + "/keys.psk";
    return Nbd().nbd_set_tls_psk_file(h, keys.c_str()) != -1 &&
           Nbd().nbd_set_tls_username(h, tls.username.c_str()) != -1;
  }
  return Nbd().nbd_set_tls_certificates(h, tls.dir.c_str()) != -1 &&
         Nbd().nbd_set_tls_verify_peer(h, tls.verify_peer) != -1;
}

}  // namespace

bool NbdHandleEnded(nbd_handle* handle) {
  return Nbd().nbd_aio_is_dead(handle) || Nbd().nbd_aio_is_closed(handle);
}

void NbdHandleCloser::operator()(nbd_handle* handle) const {
  if (Nbd().nbd_aio_is_ready(handle) || Nbd().nbd_aio_is_processing(handle))
    Nbd().nbd_aio_disconnect(handle, 0);
  Nbd().nbd_close(handle);
}

NbdServerInfo ReadServerInfo(nbd_handle* handle) {
  NbdServerInfo info;
  const int64_t size = Nbd().nbd_get_size(handle);
  info.size = size > 0 ? static_cast<uint64_t>(size) : 0;
  info.read_only = Nbd().nbd_is_read_only(handle) == 1;
  info.can_flush = Nbd().nbd_can_flush(handle) == 1;
  info.can_fua = Nbd().nbd_can_fua(handle) == 1;
  info.can_trim = Nbd().nbd_can_trim(handle) == 1;
  info.can_zero = Nbd().nbd_can_zero(handle) == 1;
  info.can_multi_conn = Nbd().nbd_can_multi_conn(handle) == 1;
  info.block_status = Nbd().nbd_can_meta_context(handle, LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
  const int64_t min_block = Nbd().nbd_get_block_size(handle, LIBNBD_SIZE_MINIMUM);
  const int64_t max_payload = Nbd().nbd_get_block_size(handle, LIBNBD_SIZE_MAXIMUM);
  info.min_block = min_block > 0 ? static_cast<uint32_t>(min_block) : 0;
  info.max_payload = max_payload > 0 ? static_cast<uint32_t>(max_payload) : 0;
  return info;
}

std::string NbdAddress(const NbdOptions& options) {
  if (options.transport == NbdOptions::Transport::kUnix) return "unix:" + options.path;
  return options.host + ":" + options.port;
}

std::string NbdFilename(const NbdOptions& options) {
  const std::string& name = options.export_name;
  if (options.transport == NbdOptions::Transport::kUnix) {
    return name.empty() ? fmt::format("nbd+unix://?socket={}", options.path)
                        : fmt::format("nbd+unix:///{}?socket={}", name, options.path);
  }
  return name.empty() ? fmt::format("nbd://{}:{}", options.host, options.port)
                      : fmt::format("nbd://{}:{}/{}", options.host, options.port, name);
}

absl::StatusOr<NbdHandle> ConnectNbd(const NbdOptions& options, int cancel_fd,
                                     std::chrono::milliseconds timeout) {
  NbdHandle handle(Nbd().nbd_create());
  if (handle == nullptr) {
    return absl::ResourceExhaustedError(
        fmt::format("cannot create a libnbd handle: {}", LastError("out of memory")));
  }
  nbd_handle* h = handle.get();
  // Read buffers are the submitter's and only used when the read succeeds, so libnbd need not
  // zero them before every read.
  if (Nbd().nbd_set_export_name(h, options.export_name.c_str()) == -1 ||
      Nbd().nbd_add_meta_context(h, LIBNBD_CONTEXT_BASE_ALLOCATION) == -1 ||
      Nbd().nbd_set_pread_initialize(h, false) == -1) {
    return absl::InternalError(LastError("cannot set up the libnbd handle"));
  }
  if (options.tls.has_value() && !SetUpTls(h, *options.tls)) {
    return absl::FailedPreconditionError(LastError("cannot set up TLS"));
  }
  const int started =
      options.transport == NbdOptions::Transport::kUnix
          ? Nbd().nbd_aio_connect_unix(h, options.path.c_str())
          : Nbd().nbd_aio_connect_tcp(h, options.host.c_str(), options.port.c_str());
  if (started == -1) return absl::UnavailableError(LastError("cannot connect"));

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!Nbd().nbd_aio_is_ready(h)) {
    if (NbdHandleEnded(h)) {
      return absl::UnavailableError(LastError("the server closed the connection in the handshake"));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(fmt::format(
          "the server did not complete the handshake within {} s", timeout.count() / 1000));
    }
    const int fd = Nbd().nbd_aio_get_fd(h);
    if (fd == -1) return absl::UnavailableError(LastError("the connection has no socket"));
    const unsigned direction = Nbd().nbd_aio_get_direction(h);
    struct pollfd fds[2] = {
        {fd,
         static_cast<short>(((direction & LIBNBD_AIO_DIRECTION_READ) ? POLLIN : 0) |
                            ((direction & LIBNBD_AIO_DIRECTION_WRITE) ? POLLOUT : 0)),
         0},
        {cancel_fd, POLLIN, 0}};
    const int ready = ::poll(fds, cancel_fd >= 0 ? 2 : 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(fmt::format("poll: {}", std::strerror(errno)));
    }
    if (ready <= 0) continue;
    if (cancel_fd >= 0 && fds[1].revents != 0) {
      return absl::CancelledError("the connection attempt was cancelled");
    }
    // An error or hang-up is for the state machine to find, in whichever direction it waits.
    const short failed = POLLERR | POLLHUP;
    if ((direction & LIBNBD_AIO_DIRECTION_READ) && (fds[0].revents & (POLLIN | failed))) {
      Nbd().nbd_aio_notify_read(h);
    } else if ((direction & LIBNBD_AIO_DIRECTION_WRITE) && (fds[0].revents & (POLLOUT | failed))) {
      Nbd().nbd_aio_notify_write(h);
    }
  }
  return handle;
}

absl::Status CheckBlockSizes(const NbdServerInfo& info) {
  const uint32_t block = info.min_block;
  if (block == 0) return absl::OkStatus();
  if (!std::has_single_bit(block) || block > kNbdMaxMinBlock) {
    return absl::FailedPreconditionError(
        fmt::format("the server's minimum block size {} is not a power of two of at most {} bytes",
                    block, kNbdMaxMinBlock));
  }
  if (info.size % block != 0) {
    return absl::FailedPreconditionError(
        fmt::format("the export's size {} is not a multiple of the server's minimum block size {}",
                    info.size, block));
  }
  return absl::OkStatus();
}

absl::Status CheckSameExport(const NbdServerInfo& opened, const NbdServerInfo& now, bool writable,
                             bool multi_conn) {
  if (absl::Status sizes = CheckBlockSizes(now); !sizes.ok()) return sizes;
  if (now.size != opened.size) {
    return absl::FailedPreconditionError(
        fmt::format("the export's size changed from {} to {} bytes", opened.size, now.size));
  }
  if (writable && now.read_only) {
    return absl::FailedPreconditionError("the export has become read-only");
  }
  if (multi_conn && !now.can_multi_conn) {
    return absl::FailedPreconditionError(
        "the server no longer allows several connections (multi-conn)");
  }
  if (now.min_block > opened.min_block) {
    return absl::FailedPreconditionError(
        fmt::format("the server's minimum block size grew from {} to {} bytes", opened.min_block,
                    now.min_block));
  }
  return absl::OkStatus();
}

}  // namespace bexd::block
