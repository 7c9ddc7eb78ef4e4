// SPDX-License-Identifier: GPL-2.0-or-later
// A QMP client for tests: connects to a bexd monitor socket, sends requests, and reads replies
// and events, every read bounded by a timeout.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <optional>
#include <string>

namespace bexd::testing {

class QmpClient {
 public:
  // Connects, retrying until the socket accepts (up to `timeout`); check connected().
  explicit QmpClient(const std::string& socket_path,
                     std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // Talks to a bexd whose stdin is `write_fd` and stdout `read_fd` (--chardev stdio); takes both.
  QmpClient(int read_fd, int write_fd);
  ~QmpClient();
  QmpClient(const QmpClient&) = delete;
  QmpClient& operator=(const QmpClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  // Reads the greeting and sends qmp_capabilities; returns the greeting.
  nlohmann::json Negotiate();
  // Sends one request and returns the next reply (events that arrive first are kept).
  nlohmann::json Execute(const std::string& command,
                         const nlohmann::json& arguments = nlohmann::json::object());
  void SendRaw(std::string_view bytes);
  // The next message that is not an event; null on timeout or end of stream.
  nlohmann::json ReadReply();
  // The next message of any kind exactly as sent, its final "\r\n" included (a pretty message
  // spans several lines); nullopt on timeout or end of stream.
  std::optional<std::string> ReadRawMessage(
      std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // The next message of any kind; nullopt on timeout or end of stream.
  std::optional<nlohmann::json> ReadMessage(
      std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Waits for an event named `name` (also among those already received).
  std::optional<nlohmann::json> WaitEvent(
      const std::string& name, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // True once the server has closed the connection (reads until EOF, bounded).
  bool WaitClosed(std::chrono::milliseconds timeout = std::chrono::seconds(20));

 private:
  int fd_ = -1;
  int write_fd_ = -1;  // a pipe, or -1: write to the socket fd_
  std::string buffer_;
  std::deque<nlohmann::json> events_;
};

}  // namespace bexd::testing
