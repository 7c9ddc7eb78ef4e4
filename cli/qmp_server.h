// The QMP control sockets: listening unix sockets, their clients, and the framing of requests
// and replies. Runs on the main thread's EventLoop; commands go to QmpCommands.
#pragma once

#include <absl/status/status.h>
#include <nlohmann/json.hpp>

#include <list>
#include <memory>
#include <string>
#include <vector>

#include "cli/event_loop.h"
#include "cli/json_stream.h"
#include "cli/qmp_commands.h"
#include "export/unix_socket_listener.h"

namespace bexd::cli {

class QmpServer {
 public:
  // A request that grows beyond this without completing drops its client.
  static constexpr size_t kMaxRequestBytes = 1 << 20;
  // A client that stops reading while this much output is pending is dropped.
  static constexpr size_t kMaxPendingOutputBytes = 16 << 20;

  QmpServer(EventLoop* loop, QmpCommands* commands) : loop_(loop), commands_(commands) {}
  ~QmpServer();  // closes every socket and removes the socket files it created
  QmpServer(const QmpServer&) = delete;
  QmpServer& operator=(const QmpServer&) = delete;

  // Listens on a unix socket at `path`, by exp::UnixSocketListener's rules: a stale socket file
  // there is replaced; a live one, or any other file, is an error.
  absl::Status Listen(const std::string& path, bool pretty);
  // Sends `event` to every client past capabilities negotiation.
  void Broadcast(const nlohmann::json& event);
  // Tries once more to send pending replies (e.g. the reply to "quit") before shutting down.
  void FlushAll();

 private:
  struct Listener {
    int fd;
    std::string path;
    bool pretty;
  };
  struct Client {
    int fd;
    bool pretty;
    bool negotiated = false;
    bool want_write = false;
    JsonStream input{kMaxRequestBytes};
    std::string output;
  };

  void Accept(const Listener& listener);
  void OnClientEvent(Client* client, uint32_t events);
  void HandleInput(Client* client);
  void Send(Client* client, const nlohmann::json& message);
  // False if the client had to be dropped.
  bool Flush(Client* client);
  // Closes the connection at once; the Client entry stays (callers up the stack may hold it)
  // until ForgetDroppedClients(), which only the event handlers call, last.
  void Drop(Client* client, std::string_view reason);
  void ForgetDroppedClients();

  EventLoop* loop_;
  QmpCommands* commands_;
  std::vector<Listener> listeners_;
  // Owns the listening sockets of listeners_ (closing them removes their files).
  std::vector<exp::UnixSocketListener> sockets_;
  std::list<Client> clients_;
};

}  // namespace bexd::cli
