#include "cli/qmp_server.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "cli/json_text.h"
#include "util/log.h"

namespace bexd::cli {
namespace {

constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;
constexpr size_t kReadChunk = 64 * 1024;
// Bytes read from one client per wake-up, so one busy client cannot starve the others.
constexpr size_t kReadBudget = 1 << 20;

}  // namespace

QmpServer::~QmpServer() {
  for (Client& client : clients_) {
    if (client.fd >= 0) {
      loop_->Remove(client.fd);
      ::close(client.fd);
    }
  }
  for (const Listener& listener : listeners_) {
    loop_->Remove(listener.fd);
  }
}

absl::Status QmpServer::Listen(const std::string& path, bool pretty) {
  absl::StatusOr<exp::UnixSocketListener> socket = exp::UnixSocketListener::Listen(path, SOMAXCONN);
  if (!socket.ok()) {
    return absl::Status(socket.status().code(),
                        fmt::format("monitor {}", std::string(socket.status().message())));
  }
  listeners_.push_back({socket->fd(), path, pretty});
  sockets_.push_back(*std::move(socket));
  const Listener listener = listeners_.back();
  absl::Status status =
      loop_->Add(listener.fd, EPOLLIN, [this, listener](uint32_t) { Accept(listener); });
  if (!status.ok()) return status;
  log::Debug("QMP monitor listening on {}", path);
  return absl::OkStatus();
}

void QmpServer::Accept(const Listener& listener) {
  for (;;) {
    int fd = ::accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        log::Warn("QMP monitor {}: accept: {}", listener.path, std::strerror(errno));
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    Client& client = clients_.emplace_back();
    client.fd = fd;
    client.pretty = listener.pretty;
    Client* pointer = &client;
    absl::Status status = loop_->Add(fd, kReadEvents, [this, pointer](uint32_t events) {
      OnClientEvent(pointer, events);
      std::erase_if(clients_, [](const Client& c) { return c.fd < 0; });
    });
    if (!status.ok()) {
      log::Warn("QMP monitor {}: {}", listener.path, status.ToString());
      ::close(fd);
      clients_.pop_back();
      continue;
    }
    log::Debug("QMP client connected on {}", listener.path);
    Send(&client, QmpGreeting());
  }
  ForgetDroppedClients();
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
  for (size_t total = 0; total < kReadBudget;) {
    ssize_t n = ::read(client->fd, buffer, sizeof(buffer));
    if (n > 0) {
      client->input.Append(std::string_view(buffer, n));
      total += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    end_of_stream = true;  // EOF or a connection error
    break;
  }
  HandleInput(client);
  if (client->fd >= 0 && end_of_stream) {
    Flush(client);
    if (client->fd >= 0) Drop(client, "disconnected");
  }
}

void QmpServer::HandleInput(Client* client) {
  while (client->fd >= 0) {
    std::optional<std::string> document = client->input.Next();
    if (!document) break;
    absl::StatusOr<nlohmann::json> request = ParseJsonText(*document);
    if (!request.ok()) {
      Send(client, QmpError("GenericError", std::string(request.status().message())));
      continue;
    }
    Send(client, commands_->Handle(*request, &client->negotiated));
  }
  if (client->fd >= 0 && client->input.overflowed()) {
    Send(client, QmpError("GenericError",
                          fmt::format("request longer than {} bytes; closing the connection",
                                      kMaxRequestBytes)));
    Flush(client);
    if (client->fd >= 0) Drop(client, "request too long");
  }
}

void QmpServer::Send(Client* client, const nlohmann::json& message) {
  if (client->fd < 0) return;
  client->output += DumpJson(message, client->pretty);
  client->output += "\r\n";
  Flush(client);
}

bool QmpServer::Flush(Client* client) {
  while (!client->output.empty()) {
    ssize_t n = ::send(client->fd, client->output.data(), client->output.size(),
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
      return true;
    }
    Drop(client, std::strerror(errno));
    return false;
  }
  if (client->want_write) {
    client->want_write = false;
    (void)loop_->Modify(client->fd, kReadEvents);
  }
  return true;
}

void QmpServer::Drop(Client* client, std::string_view reason) {
  log::Debug("QMP client dropped: {}", reason);
  loop_->Remove(client->fd);
  ::close(client->fd);
  client->fd = -1;
  client->output.clear();
}

void QmpServer::Broadcast(const nlohmann::json& event) {
  for (Client& client : clients_) {
    if (client.fd >= 0 && client.negotiated) Send(&client, event);
  }
}

void QmpServer::FlushAll() {
  for (Client& client : clients_) {
    if (client.fd >= 0) Flush(&client);
  }
}

}  // namespace bexd::cli
