// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/control/qmp_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace bexd::testing {

using nlohmann::json;

QmpClient::QmpClient(const std::string& socket_path, std::chrono::milliseconds timeout) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_path.c_str(), sizeof(address.sun_path) - 1);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
      fd_ = fd;
      return;
    }
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

QmpClient::QmpClient(int read_fd, int write_fd) : fd_(read_fd), write_fd_(write_fd) {}

QmpClient::~QmpClient() {
  if (fd_ >= 0) ::close(fd_);
  if (write_fd_ >= 0) ::close(write_fd_);
}

void QmpClient::SendRaw(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = write_fd_ >= 0 ? ::write(write_fd_, bytes.data(), bytes.size())
                               : ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    bytes.remove_prefix(n);
  }
}

std::optional<json> QmpClient::ReadMessage(std::chrono::milliseconds timeout) {
  std::optional<std::string> text = ReadRawMessage(timeout);
  if (!text) return std::nullopt;
  return json::parse(*text);
}

std::optional<std::string> QmpClient::ReadRawMessage(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    // A message ends at the first line end where what came before is a whole JSON value.
    for (size_t end = buffer_.find("\r\n"); end != std::string::npos;
         end = buffer_.find("\r\n", end + 2)) {
      if (!json::accept(buffer_.substr(0, end))) continue;
      std::string message = buffer_.substr(0, end + 2);
      buffer_.erase(0, end + 2);
      return message;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd pfd = {fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[65536];
    ssize_t n = ::read(fd_, chunk, sizeof(chunk));
    if (n <= 0) return std::nullopt;
    buffer_.append(chunk, n);
  }
}

json QmpClient::ReadReply() {
  for (;;) {
    std::optional<json> message = ReadMessage();
    if (!message) return nullptr;
    if (!message->contains("event")) return *message;
    events_.push_back(*message);
  }
}

json QmpClient::Negotiate() {
  std::optional<json> greeting = ReadMessage();
  SendRaw(R"({"execute":"qmp_capabilities"})"
          "\n");
  ReadReply();
  return greeting ? *greeting : json();
}

json QmpClient::Execute(const std::string& command, const json& arguments) {
  SendRaw(json({{"execute", command}, {"arguments", arguments}}).dump() + "\n");
  return ReadReply();
}

std::optional<json> QmpClient::WaitEvent(const std::string& name,
                                         std::chrono::milliseconds timeout) {
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    if ((*it)["event"] == name) {
      json event = *it;
      events_.erase(it);
      return event;
    }
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::optional<json> message = ReadMessage(std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()));
    if (!message) return std::nullopt;
    if ((*message)["event"] == name) return message;
    if (message->contains("event")) events_.push_back(*message);
  }
  return std::nullopt;
}

bool QmpClient::WaitClosed(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd = {fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    char chunk[65536];
    ssize_t n = ::read(fd_, chunk, sizeof(chunk));
    if (n <= 0) return true;
    buffer_.append(chunk, n);
  }
  return false;
}

}  // namespace bexd::testing
