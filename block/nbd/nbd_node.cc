// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/nbd/nbd_node.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "block/nbd/nbd_api.h"
#include "block/nbd/nbd_own_queue.h"
#include "block/nbd/nbd_shared_queue.h"
#include "util/log.h"
#include "util/rate_limit.h"
#include "util/status.h"

namespace bexd::block {
namespace {

// Whether a connection nobody has used yet is still open: a server that went away meanwhile has
// left it readable (end of file), since it has no reply to send.
bool StillOpen(nbd_handle* handle) {
  if (!Nbd().nbd_aio_is_ready(handle)) return false;
  struct pollfd socket = {Nbd().nbd_aio_get_fd(handle), POLLIN, 0};
  return socket.fd >= 0 && poll(&socket, 1, 0) == 0;
}

// The first connection: one attempt, or with open-timeout (QEMU's) attempts until one succeeds or
// the timeout is over, with the pauses of reconnections between them (cut short by the deadline,
// at which one last attempt runs).
absl::StatusOr<NbdHandle> ConnectAtOpen(const std::string& node_name, const NbdOptions& options) {
  using std::chrono::steady_clock;
  const steady_clock::time_point deadline =
      steady_clock::now() + std::chrono::seconds(options.open_timeout);
  std::chrono::seconds pause{0};
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady_clock::now());
    absl::StatusOr<NbdHandle> handle = ConnectNbd(
        options, -1,
        options.open_timeout == 0 ? std::chrono::milliseconds(kNbdConnectTimeout)
                                  : std::clamp(left, std::chrono::milliseconds(100),
                                               std::chrono::milliseconds(kNbdConnectTimeout)));
    pause = NextNbdAttemptPause(pause);
    const steady_clock::time_point now = steady_clock::now();
    if (handle.ok() || now >= deadline) return handle;
    const steady_clock::time_point next = std::min(now + pause, deadline);
    static log::RateLimit failed_attempt;
    log::Limited(failed_attempt, log::Level::kInfo,
                 "node '{}': connecting to NBD server {} failed: {}; next attempt in {:.1f} s "
                 "(open-timeout {} s)",
                 node_name, NbdAddress(options), std::string(handle.status().message()),
                 std::chrono::duration<double>(next - now).count(), options.open_timeout);
    std::this_thread::sleep_until(next);
  }
}

// Looks up the TLS credentials that tls-creds names, with QEMU's checks, into options->tls.
absl::Status ResolveTls(NbdOptions* options) {
  if (options->tls_creds.empty()) return absl::OkStatus();
  absl::StatusOr<TlsCredentials> credentials = LookupTlsCredentials(options->tls_creds);
  if (!credentials.ok()) return credentials.status();
  if (!credentials->client) {
    return absl::InvalidArgumentError("Expecting TLS credentials with a client endpoint");
  }
  const bool names_checked =
      credentials->kind == TlsCredentials::Kind::kX509 && credentials->verify_peer;
  if (names_checked && !options->tls_hostname.empty()) {
    // libnbd has no call to name another host (Debian 12's 1.14): it checks the name it
    // connected to, and none over a unix socket. A tls-hostname it would not check is refused.
    if (options->transport == NbdOptions::Transport::kUnix) {
      return absl::InvalidArgumentError(
          fmt::format("tls-hostname '{}': over a unix socket libnbd checks no name in the server's "
                      "certificate (only that a trusted CA signed it); leave tls-hostname out",
                      options->tls_hostname));
    }
    if (options->tls_hostname != options->host) {
      return absl::InvalidArgumentError(
          fmt::format("tls-hostname '{}': libnbd checks the server's certificate for the name it "
                      "connects to, server.host '{}'; connect to '{}' instead",
                      options->tls_hostname, options->host, options->tls_hostname));
    }
  }
  options->tls = *std::move(credentials);
  return absl::OkStatus();
}

}  // namespace

NbdNode::NbdNode(std::string node_name, const NbdOptions& options, const NbdServerInfo& opened,
                 bool read_only)
    : BlockNode(node_name),
      link_{.node_name = node_name, .options = options, .opened = opened},
      read_only_(read_only),
      connector_(std::make_unique<NbdConnector>(node_name, options, opened, !read_only,
                                                opened.can_multi_conn)) {
  link_.connector = connector_.get();
}

NbdNode::~NbdNode() = default;

absl::StatusOr<std::shared_ptr<NbdNode>> NbdNode::Open(std::string node_name,
                                                       const NbdOptions& given, bool read_only) {
  if (absl::Status loaded = LoadNbdApi(); !loaded.ok()) {
    return util::AnnotateStatus(fmt::format("node '{}'", node_name), loaded);
  }
  NbdOptions options = given;
  if (absl::Status tls = ResolveTls(&options); !tls.ok()) {
    return util::AnnotateStatus(
        fmt::format("node '{}': tls-creds '{}'", node_name, given.tls_creds), tls);
  }
  const std::string address = NbdAddress(options);
  absl::StatusOr<NbdHandle> handle = ConnectAtOpen(node_name, options);
  if (!handle.ok()) {
    return util::AnnotateStatus(
        fmt::format("node '{}': cannot connect to NBD server {}", node_name, address),
        handle.status());
  }
  const NbdServerInfo info = ReadServerInfo(handle->get());
  if (absl::Status sizes = CheckBlockSizes(info); !sizes.ok()) {
    return util::AnnotateStatus(fmt::format("node '{}': NBD server {} export '{}'", node_name,
                                            address, options.export_name),
                                sizes);
  }
  if (info.read_only && !read_only) {
    return absl::InvalidArgumentError(
        fmt::format("node '{}': NBD server {} exports '{}' read-only; open the node with "
                    "read-only=on",
                    node_name, address, options.export_name));
  }
  std::shared_ptr<NbdNode> node(new NbdNode(node_name, options, info, read_only));
  if (info.can_multi_conn) {
    node->spare_ = *std::move(handle);
  } else {
    absl::StatusOr<std::unique_ptr<NbdConnectionThread>> thread =
        NbdConnectionThread::Start(node->link_, *std::move(handle));
    if (!thread.ok()) return thread.status();
    node->connection_thread_ = *std::move(thread);
  }
  log::Info("node '{}': {}", node_name, node->description());
  return node;
}

uint32_t NbdNode::request_alignment() const {
  const NbdServerInfo& info = link_.opened;
  if (info.min_block != 0) return info.min_block;
  return info.block_status || info.size % 512 != 0 ? 1 : 512;
}

Capabilities NbdNode::capabilities() const {
  const NbdServerInfo& offered = link_.opened;
  Capabilities capabilities;
  capabilities.discard =
      !read_only_ && offered.can_trim && link_.options.discard == DiscardMode::kUnmap;
  capabilities.block_status = offered.block_status;
  capabilities.flush = !read_only_ && offered.can_flush;
  capabilities.allocate = false;  // NBD cannot reserve space on the server
  capabilities.resize = false;
  return capabilities;
}

absl::Status NbdNode::Truncate(uint64_t new_size) {
  if (new_size == size()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      fmt::format("node '{}': cannot resize an NBD export (its size, {} bytes, is the server's)",
                  node_name(), size()));
}

absl::StatusOr<NbdHandle> NbdNode::QueueConnection() {
  {
    std::lock_guard lock(spare_mutex_);
    if (spare_ != nullptr && StillOpen(spare_.get())) return std::move(spare_);
    spare_.reset();
  }
  absl::StatusOr<NbdHandle> handle = ConnectNbd(link_.options, -1, kNbdConnectTimeout);
  if (!handle.ok()) return handle.status();
  absl::Status same = CheckSameExport(link_.opened, ReadServerInfo(handle->get()), !read_only_,
                                      /*multi_conn=*/true);
  if (!same.ok()) return same;
  return handle;
}

absl::StatusOr<std::unique_ptr<IoQueue>> NbdNode::CreateDriverQueue() {
  if (connection_thread_ != nullptr) {
    const int event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (event_fd < 0) {
      return absl::ErrnoToStatus(
          errno, fmt::format("node '{}': cannot create a queue's eventfd", node_name()));
    }
    return std::unique_ptr<IoQueue>(
        new NbdSharedQueue(shared_from_this(), connection_thread_.get(), event_fd));
  }
  absl::StatusOr<NbdHandle> handle = QueueConnection();
  if (!handle.ok()) {
    return util::AnnotateStatus(
        fmt::format("node '{}': cannot connect to NBD server {} for a new queue", node_name(),
                    NbdAddress(link_.options)),
        handle.status());
  }
  absl::StatusOr<std::unique_ptr<NbdConnection>> connection =
      NbdConnection::Create(link_, *std::move(handle), &NbdOwnQueue::OnFinished, nullptr);
  if (!connection.ok()) return connection.status();
  return std::unique_ptr<IoQueue>(new NbdOwnQueue(shared_from_this(), *std::move(connection)));
}

std::string NbdNode::description() const {
  const NbdServerInfo& info = link_.opened;
  return fmt::format(
      "nbd server {}, export '{}' ({} bytes; {}; flush {}, fua {}, trim {}, write-zeroes {}, "
      "block status {}; reconnect-delay {} s)",
      NbdAddress(link_.options), link_.options.export_name, info.size,
      multi_conn() ? "one connection per queue (multi-conn)" : "one shared connection",
      info.can_flush ? "yes" : "no", info.can_fua ? "yes" : "no", info.can_trim ? "yes" : "no",
      info.can_zero ? "yes" : "no", info.block_status ? "yes" : "no",
      link_.options.reconnect_delay);
}

}  // namespace bexd::block
