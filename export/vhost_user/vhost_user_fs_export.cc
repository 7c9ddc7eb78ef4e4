// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/vhost_user/vhost_user_fs_export.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "export/queue/queue_cpus.h"
#include "export/vhost_user/vhost_user_channel.h"
#include "util/eventfd.h"
#include "util/log.h"
#include "util/rate_limit.h"
#include "util/status.h"

namespace bexd::exports {
namespace {

bool Readable(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

}  // namespace

VhostUserFsExport::VhostUserFsExport(const ExportOptions& options,
                                     std::shared_ptr<block::BlockNode> node,
                                     std::shared_ptr<fuse::Session> session)
    : Export(options.id, options.writable, std::move(node)),
      socket_path_(std::get<VhostUserFsExportOptions>(options.transport).socket_path),
      tag_(std::get<VhostUserFsExportOptions>(options.transport).tag),
      session_(std::move(session)) {}

absl::StatusOr<std::unique_ptr<VhostUserFsExport>> VhostUserFsExport::Start(
    const ExportOptions& options, std::shared_ptr<block::BlockNode> node,
    std::shared_ptr<fuse::Session> session) {
  const auto& vhost_options = std::get<VhostUserFsExportOptions>(options.transport);
  if (vhost_options.num_request_queues == 0 ||
      vhost_options.num_request_queues > kMaxRequestQueues) {
    return absl::InvalidArgumentError(fmt::format("num-request-queues is {}, expected 1 to {}",
                                                  vhost_options.num_request_queues,
                                                  kMaxRequestQueues));
  }
  std::unique_ptr<VhostUserFsExport> vhost_export(
      new VhostUserFsExport(options, std::move(node), std::move(session)));
  std::vector<VringQueue*> queues;
  for (uint32_t i = 0; i <= vhost_options.num_request_queues; ++i) {
    // The hiprio queue carries only FORGET and INTERRUPT: no block I/O, left to the scheduler.
    const bool hiprio = i == 0;
    absl::StatusOr<std::unique_ptr<VringQueue>> queue = VringQueue::Create(
        vhost_export->session_,
        {.label = hiprio ? fmt::format("export '{}' hiprio queue", options.id)
                         : fmt::format("export '{}' request queue {}", options.id, i),
         .thread_name = fmt::format("bexd-vhost-q{}", i),
         .cpu = hiprio ? -1 : QueueCpu(vhost_options.queue_cpus, i - 1),
         .block_io = !hiprio,
         .poll_max_ns = hiprio ? 0 : vhost_options.poll_max_ns});
    if (!queue.ok()) return queue.status();
    queues.push_back(queue->get());
    vhost_export->queues_.push_back(std::move(*queue));
  }
  vhost_export->device_ =
      std::make_unique<VhostUserDevice>(fmt::format("export '{}'", options.id), std::move(queues),
                                        [session = vhost_export->session_] {
                                          // The next frontend starts with INIT, as a new mount.
                                          session->MarkDestroyed();
                                        });
  if (absl::Status status = vhost_export->Listen(); !status.ok()) return status;
  try {
    vhost_export->thread_ = std::thread(&VhostUserFsExport::ServeConnections, vhost_export.get());
  } catch (const std::system_error& error) {
    return absl::ResourceExhaustedError(
        fmt::format("export '{}': cannot start its socket thread: {}", options.id, error.what()));
  }
  log::Info(
      "export '{}': node '{}' served over vhost-user-fs on '{}' (tag '{}', file '{}', {}, "
      "{} request queue{}{})",
      options.id, vhost_export->node()->node_name(), vhost_export->socket_path_, vhost_export->tag_,
      vhost_export->session_->options().file_name, options.writable ? "writable" : "read-only",
      vhost_options.num_request_queues, vhost_options.num_request_queues == 1 ? "" : "s",
      DescribeQueueCpus(vhost_options.queue_cpus));
  return vhost_export;
}

VhostUserFsExport::~VhostUserFsExport() { Stop(); }

absl::Status VhostUserFsExport::Listen() {
  absl::StatusOr<util::UniqueFd> stop_fd = util::CreateEventFd();
  if (!stop_fd.ok()) return stop_fd.status();
  stop_fd_ = std::move(*stop_fd);
  absl::StatusOr<UnixSocketListener> listener = UnixSocketListener::Listen(socket_path_, 1);
  if (!listener.ok()) return listener.status();
  listener_ = std::move(*listener);
  return absl::OkStatus();
}

void VhostUserFsExport::ServeConnections() {
  for (;;) {
    // Out of descriptors with none to refuse a client with, the listener stays readable: leave it
    // out of the poll for a while instead of spinning on it.
    constexpr int kOutOfDescriptorsRetryMs = 500;
    struct pollfd fds[3] = {{stop_fd_.get(), POLLIN, 0},
                            {connection_fd_.get(), POLLIN, 0},
                            {listener_.fd(), POLLIN, 0}};
    const nfds_t count = listener_stuck_ ? 2 : 3;
    int n = poll(fds, count, listener_stuck_ ? kOutOfDescriptorsRetryMs : -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log::Error("export '{}': poll: {}", id(), strerror(errno));
      break;
    }
    if (fds[0].revents) break;
    if (connection_fd_ && fds[1].revents != 0 && !ServeMessage()) Disconnect();
    if (listener_stuck_ || (fds[2].revents & POLLIN)) Accept();
  }
  Disconnect();
}

void VhostUserFsExport::Accept() {
  // A frontend that closes and reconnects at once (a restarted QEMU) may be seen connecting
  // before the end of its old connection has been read: finish with the old one first.
  while (connection_fd_ && Readable(connection_fd_.get())) {
    if (!ServeMessage()) Disconnect();
  }
  // Whoever can reach the socket can connect: every line here is rate-limited.
  absl::StatusOr<util::UniqueFd> connection = listener_.Accept([](int) {});
  listener_stuck_ = absl::IsFailedPrecondition(connection.status());
  if (!connection.ok()) {
    static log::RateLimit accept_limit;
    if (!absl::IsUnavailable(connection.status())) {
      log::Limited(accept_limit, log::Level::kWarn, "export '{}': {}", id(),
                   std::string(connection.status().message()));
    }
  } else if (connection_fd_) {
    static log::RateLimit second_limit;
    log::Limited(second_limit, log::Level::kWarn,
                 "export '{}': refusing a second frontend while one is connected", id());
  } else {
    static log::RateLimit connected_limit;
    log::Limited(connected_limit, log::Level::kInfo, "export '{}': frontend connected", id());
    connection_fd_ = *std::move(connection);
    connected_.store(true, std::memory_order_relaxed);
  }
}

bool VhostUserFsExport::ServeMessage() {
  vhost::Message message;
  absl::Status status = vhost::ReceiveMessage(connection_fd_.get(), stop_fd_.get(), &message);
  if (absl::IsCancelled(status)) return false;
  // The frontend is untrusted: every line it can cause is rate-limited.
  if (absl::IsUnavailable(status)) {
    static log::RateLimit disconnected_limit;
    log::Limited(disconnected_limit, log::Level::kInfo, "export '{}': frontend disconnected ({})",
                 id(), std::string(status.message()));
    return false;
  }
  if (!status.ok()) {
    static log::RateLimit malformed_limit;
    log::Limited(malformed_limit, log::Level::kWarn,
                 "export '{}': closing the frontend connection: {}", id(),
                 std::string(status.message()));
    return false;
  }
  VhostUserDevice::Reply reply;
  status = device_->Handle(message, &reply);
  if (reply.send) {
    absl::Status sent = vhost::SendMessage(connection_fd_.get(), stop_fd_.get(), reply.header,
                                           reply.payload, reply.header.size);
    if (!sent.ok()) {
      static log::RateLimit reply_limit;
      log::Limited(reply_limit, log::Level::kInfo, "export '{}': cannot reply to the frontend: {}",
                   id(), std::string(sent.message()));
      return false;
    }
  }
  if (!status.ok()) {
    // With a negative acknowledgement sent the frontend knows and may go on.
    static log::RateLimit refused_limit;
    log::Limited(refused_limit, log::Level::kWarn, "{}{}", std::string(status.message()),
                 reply.send ? "" : "; closing the connection");
    return reply.send;
  }
  return true;
}

void VhostUserFsExport::Disconnect() {
  if (!connection_fd_) return;
  device_->Reset();
  connection_fd_.Reset();
  connected_.store(false, std::memory_order_relaxed);
  static log::RateLimit stopped_limit;
  log::Limited(stopped_limit, log::Level::kInfo,
               "export '{}': rings stopped, guest memory unmapped; waiting for a frontend", id());
}

void VhostUserFsExport::Stop() {
  std::lock_guard lock(stop_mutex_);
  if (stopped_) return;
  stopped_ = true;
  if (!thread_.joinable()) return;  // Start() failed before serving: nothing to stop or flush
  util::SignalEventFd(stop_fd_.get());
  thread_.join();
  listener_.Close();
  FlushAfterLastReply();
  log::Info("export '{}': stopped", id());
}

std::vector<fuse::QueueStatsSnapshot> VhostUserFsExport::Stats() const {
  std::vector<fuse::QueueStatsSnapshot> stats;
  for (const auto& queue : queues_) stats.push_back(queue->Stats());
  return stats;
}

}  // namespace bexd::exports
