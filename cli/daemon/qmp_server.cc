// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/qmp_server.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cli/config/json_text.h"
#include "cli/daemon/qmp_text.h"
#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::cli {
namespace {

constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;
constexpr size_t kReadChunk = 64 * 1024;
// Bytes read from one client per wake-up, so one busy client cannot starve the others.
constexpr size_t kReadBudget = 1 << 20;

// Every line a client can cause goes through a rate limit of its own (util/rate_limit.h).
log::RateLimit connected_log;
log::RateLimit dropped_log;
log::RateLimit refused_log;
log::RateLimit accept_log;
log::RateLimit out_of_descriptors_log;

// Sends one error line to a connection that will not be served (its owner closes it); the socket
// is new, so the line fits in its buffer.
void Refuse(int fd, bool pretty, std::string_view desc) {
  std::string line = QmpText(QmpError("GenericError", desc), pretty) + "\r\n";
  [[maybe_unused]] ssize_t n = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

QmpServer::QmpServer(EventLoop* loop, QmpCommands* commands) : loop_(loop), commands_(commands) {}

QmpServer::~QmpServer() {
  for (Client& client : clients_) {
    if (client.fd >= 0) {
      loop_->Remove(client.fd);
      if (!client.stdio) ::close(client.fd);
    }
  }
  for (const Listener& listener : listeners_) {
    loop_->Remove(listener.socket.fd());
  }
}

absl::Status QmpServer::Listen(const std::string& path, bool pretty) {
  absl::StatusOr<exports::UnixSocketListener> socket =
      exports::UnixSocketListener::Listen(path, SOMAXCONN);
  if (!socket.ok()) {
    return absl::Status(socket.status().code(),
                        fmt::format("monitor {}", std::string(socket.status().message())));
  }
  absl::Status status = AddListener(*std::move(socket), pretty);
  if (status.ok()) log::Debug("QMP monitor listening on {}", path);
  return status;
}

absl::Status QmpServer::ListenOnDescriptor(int fd, bool pretty) {
  absl::StatusOr<exports::UnixSocketListener> socket =
      exports::UnixSocketListener::Adopt(util::UniqueFd(fd), fmt::format("fd={}", fd));
  if (!socket.ok()) {
    return absl::Status(socket.status().code(),
                        fmt::format("monitor {}", std::string(socket.status().message())));
  }
  return AddListener(*std::move(socket), pretty);
}

absl::Status QmpServer::AddListener(exports::UnixSocketListener socket, bool pretty) {
  Listener& listener = listeners_.emplace_back(std::move(socket), pretty);
  Listener* pointer = &listener;
  absl::Status status =
      loop_->Add(listener.socket.fd(), EPOLLIN, [this, pointer](uint32_t) { Accept(pointer); });
  if (!status.ok()) listeners_.pop_back();
  return status;
}

absl::Status QmpServer::ServeStdio(bool pretty) {
  absl::Status status = AddClient(STDIN_FILENO, STDOUT_FILENO, /*stdio=*/true, pretty);
  if (!status.ok()) {
    return absl::InvalidArgumentError(fmt::format(
        "--chardev stdio: stdin cannot be watched ({}); give a pipe, socket or terminal",
        std::string(status.message())));
  }
  return absl::OkStatus();
}

absl::Status QmpServer::AddClient(int fd, int out_fd, bool stdio, bool pretty) {
  Client& client = clients_.emplace_back();
  client.fd = fd;
  client.out_fd = out_fd;
  client.stdio = stdio;
  client.pretty = pretty;
  Client* pointer = &client;
  absl::Status status = loop_->Add(fd, kReadEvents, [this, pointer](uint32_t events) {
    OnClientEvent(pointer, events);
    EnforceHeldLimit();
    ForgetDroppedClients();
  });
  if (!status.ok()) {
    clients_.pop_back();
    return status;
  }
  ++connected_;
  Send(&client, QmpGreeting());
  return absl::OkStatus();
}

void QmpServer::Accept(Listener* listener) {
  const std::string& name = listener->socket.path();
  for (;;) {
    absl::StatusOr<util::UniqueFd> connection = listener->socket.Accept([&](int fd) {
      Refuse(fd, listener->pretty, "bexd is out of file descriptors; closing the connection");
    });
    if (!connection.ok()) {
      const absl::Status& status = connection.status();
      if (status.code() == absl::StatusCode::kUnavailable) break;  // none pending
      if (status.code() == absl::StatusCode::kResourceExhausted) {
        log::Limited(out_of_descriptors_log, log::Level::kWarn, "QMP monitor: {}",
                     std::string(status.message()));
        // Out of descriptors, accept() fails whether or not a client is pending, so go back to
        // the loop, which calls again while the listener is readable.
        break;
      }
      log::Limited(accept_log, log::Level::kWarn, "QMP monitor: {}", std::string(status.message()));
      // Out of descriptors with none in reserve: stop polling until a client leaves.
      if (status.code() == absl::StatusCode::kFailedPrecondition) PauseListeners();
      break;
    }
    if (connected_ >= kMaxClients) {
      log::Limited(refused_log, log::Level::kWarn,
                   "QMP monitor {}: refused a client: {} clients are connected already", name,
                   kMaxClients);
      Refuse(connection->get(), listener->pretty,
             fmt::format("too many QMP clients (at most {}); closing the connection", kMaxClients));
      continue;
    }
    const int fd = connection->Release();
    absl::Status status = AddClient(fd, fd, /*stdio=*/false, listener->pretty);
    if (!status.ok()) {
      log::Limited(accept_log, log::Level::kWarn, "QMP monitor {}: {}", name, status.ToString());
      ::close(fd);
      continue;
    }
    log::Limited(connected_log, log::Level::kDebug, "QMP client connected on {}", name);
  }
  ForgetDroppedClients();
}

void QmpServer::PauseListeners() {
  if (listeners_paused_) return;
  listeners_paused_ = true;
  for (const Listener& listener : listeners_) (void)loop_->Modify(listener.socket.fd(), 0);
}

void QmpServer::ResumeListeners() {
  if (!listeners_paused_) return;
  listeners_paused_ = false;
  for (const Listener& listener : listeners_) (void)loop_->Modify(listener.socket.fd(), EPOLLIN);
}

void QmpServer::ForgetDroppedClients() {
  std::erase_if(clients_, [](const Client& client) { return client.fd < 0; });
}

void QmpServer::OnClientEvent(Client* client, uint32_t events) {
  if (events & EPOLLOUT) {
    if (!Flush(client)) return;
  }
  if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) return;
  bool end_of_stream = false;
  char buffer[kReadChunk];
  for (size_t total = 0; total < kReadBudget && client->fd >= 0;) {
    ssize_t n = ::read(client->fd, buffer, sizeof(buffer));
    if (n > 0) {
      // Handled chunk by chunk, so the stream holds one chunk of input at most.
      client->input.Append(std::string_view(buffer, n));
      HandleInput(client);
      total += n;
      if (client->stdio) break;  // stdin blocks: read again when epoll says so
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    end_of_stream = true;  // EOF or a connection error
    break;
  }
  if (client->fd >= 0 && end_of_stream) {
    Flush(client);
    if (client->fd >= 0) Drop(client, "disconnected");
  }
}

void QmpServer::HandleInput(Client* client) {
  // After quit nothing more runs: a command that came in the same read as the quit (an export
  // added, a second quit) would act on a daemon that is stopping.
  while (client->fd >= 0 && !commands_->quit_requested()) {
    std::optional<absl::StatusOr<std::string>> message = client->input.Next();
    if (!message) break;
    absl::StatusOr<nlohmann::json> request =
        message->ok() ? ParseJsonText(**message) : message->status();
    if (!request.ok()) {
      Send(client, QmpError("GenericError", std::string(request.status().message())));
      continue;
    }
    Send(client, commands_->Handle(*request, &client->negotiated));
  }
  CountHeld(client);
}

void QmpServer::Send(Client* client, const nlohmann::json& message) {
  if (client->fd < 0) return;
  client->output += QmpText(message, client->pretty);
  client->output += "\r\n";
  Flush(client);
}

bool QmpServer::Flush(Client* client) {
  while (!client->output.empty()) {
    ssize_t n = client->stdio
                    ? ::write(client->out_fd, client->output.data(), client->output.size())
                    : ::send(client->fd, client->output.data(), client->output.size(),
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      client->output.erase(0, n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (client->output.size() > kMaxPendingOutputBytes) {
        Drop(client, "not reading its replies");
        return false;
      }
      if (!client->want_write) {
        client->want_write = true;
        (void)loop_->Modify(client->fd, kReadEvents | EPOLLOUT);
      }
      CountHeld(client);
      return true;
    }
    Drop(client, std::strerror(errno));
    return false;
  }
  if (client->want_write) {
    client->want_write = false;
    (void)loop_->Modify(client->fd, kReadEvents);
  }
  CountHeld(client);
  return true;
}

void QmpServer::CountHeld(Client* client) {
  if (client->fd < 0) return;  // Drop() took its part out
  held_bytes_ -= client->held;
  client->held = client->input.buffered_bytes() + client->output.size();
  held_bytes_ += client->held;
}

void QmpServer::EnforceHeldLimit() {
  while (held_bytes_ > kMaxHeldBytes) {
    // The client holding the most is the one flooding; the others keep what they sent.
    Client* largest =
        &*std::max_element(clients_.begin(), clients_.end(),
                           [](const Client& a, const Client& b) { return a.held < b.held; });
    log::Limited(refused_log, log::Level::kWarn,
                 "QMP clients hold more than {} bytes of unfinished requests and unsent replies; "
                 "dropped the one holding the most ({} bytes)",
                 kMaxHeldBytes, largest->held);
    Send(largest, QmpError("GenericError",
                           fmt::format("QMP clients hold more than {} bytes of unfinished requests "
                                       "and unsent replies, this client the most; closing the "
                                       "connection",
                                       kMaxHeldBytes)));
    if (largest->fd >= 0) Drop(largest, "holding too much");
  }
}

void QmpServer::Drop(Client* client, std::string_view reason) {
  log::Limited(dropped_log, log::Level::kDebug, "QMP client dropped: {}", reason);
  loop_->Remove(client->fd);
  if (!client->stdio) ::close(client->fd);
  client->fd = -1;
  client->output.clear();
  client->input = JsonStream(kMaxRequestBytes);
  held_bytes_ -= client->held;
  client->held = 0;
  --connected_;
  // A descriptor is free again.
  ResumeListeners();
}

void QmpServer::Broadcast(const nlohmann::json& event) {
  for (Client& client : clients_) {
    if (client.fd >= 0 && client.negotiated) Send(&client, event);
  }
  EnforceHeldLimit();
}

void QmpServer::FlushAll() {
  for (Client& client : clients_) {
    if (client.fd >= 0) Flush(&client);
  }
}

}  // namespace bexd::cli
