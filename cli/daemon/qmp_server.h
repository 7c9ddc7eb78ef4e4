// SPDX-License-Identifier: GPL-2.0-or-later
// The QMP control sockets: listening unix sockets, their clients, and the framing of requests
// and replies. Runs on the main thread's EventLoop; commands go to QmpCommands.
#pragma once

#include <absl/status/status.h>
#include <nlohmann/json.hpp>

#include <list>
#include <memory>
#include <string>
#include <vector>

#include "cli/config/json_stream.h"
#include "cli/daemon/event_loop.h"
#include "cli/daemon/qmp_commands.h"
#include "util/unique_fd.h"
#include "util/unix_socket_listener.h"

namespace bexd::cli {

class QmpServer {
 public:
  // A longer request is refused with an error and skipped; the client stays connected.
  static constexpr size_t kMaxRequestBytes = 1 << 20;
  // Clients connected at once, across every monitor socket; a client beyond is refused.
  static constexpr size_t kMaxClients = 64;
  // A client that stops reading while this much output is pending is dropped.
  static constexpr size_t kMaxPendingOutputBytes = 16 << 20;
  // What all clients together may hold in unfinished requests and unsent replies; past it the
  // client holding the most is dropped.
  static constexpr size_t kMaxHeldBytes = 32 << 20;

  QmpServer(EventLoop* loop, QmpCommands* commands);
  ~QmpServer();  // closes every socket and removes the socket files it created
  QmpServer(const QmpServer&) = delete;
  QmpServer& operator=(const QmpServer&) = delete;

  // Listens on a unix socket at `path`, by exports::UnixSocketListener's rules: a stale socket file
  // there is replaced; a live one, or any other file, is an error.
  absl::Status Listen(const std::string& path, bool pretty);
  // Listens on `fd`, a listening unix socket bexd was given (--chardev socket,fd=N); takes it
  // over and closes it at the end.
  absl::Status ListenOnDescriptor(int fd, bool pretty);
  // Serves one client on stdin and stdout (--chardev stdio): greeted at once; its end of input
  // ends the client, not the daemon, as in QSD. Output is written blocking, in order.
  absl::Status ServeStdio(bool pretty);
  // Sends `event` to every client past capabilities negotiation.
  void Broadcast(const nlohmann::json& event);
  // Tries once more to send pending replies (e.g. the reply to "quit") before shutting down.
  void FlushAll();

 private:
  struct Listener {
    Listener(exports::UnixSocketListener socket, bool pretty)
        : socket(std::move(socket)), pretty(pretty) {}
    exports::UnixSocketListener socket;  // its path() names it in log lines ("fd=N" if passed)
    bool pretty;
  };
  struct Client {
    int fd;      // read from; for a socket also written to
    int out_fd;  // written to: fd, or stdout
    bool stdio;  // fd is stdin: neither a socket nor ours to close
    bool pretty;
    bool negotiated = false;
    bool want_write = false;
    JsonStream input{kMaxRequestBytes};
    std::string output;
    size_t held = 0;  // input.buffered_bytes() + output.size(), as counted in held_bytes_
  };

  absl::Status AddListener(exports::UnixSocketListener socket, bool pretty);
  // Accepts every pending connection; out of descriptors, the listener refuses them through its
  // reserve descriptor (exports::UnixSocketListener::Accept).
  void Accept(Listener* listener);
  // Adds a connected client, registered with the loop, and greets it.
  absl::Status AddClient(int fd, int out_fd, bool stdio, bool pretty);
  void PauseListeners();
  void ResumeListeners();
  void OnClientEvent(Client* client, uint32_t events);
  void HandleInput(Client* client);
  void Send(Client* client, const nlohmann::json& message);
  // False if the client had to be dropped.
  bool Flush(Client* client);
  // Brings the client's part of held_bytes_ up to date after its input or output changed.
  void CountHeld(Client* client);
  // Drops the clients holding the most while held_bytes_ exceeds kMaxHeldBytes.
  void EnforceHeldLimit();
  // Closes the connection at once; the Client entry stays (callers up the stack may hold it)
  // until ForgetDroppedClients(), which only the event handlers call, last.
  void Drop(Client* client, std::string_view reason);
  void ForgetDroppedClients();

  EventLoop* loop_;
  QmpCommands* commands_;
  // Listening sockets (closing them removes the files they bound); a list, as the loop's
  // callbacks hold pointers to them.
  std::list<Listener> listeners_;
  std::list<Client> clients_;
  size_t connected_ = 0;           // clients not dropped yet
  size_t held_bytes_ = 0;          // the sum of their held bytes
  bool listeners_paused_ = false;  // out of descriptors, with no reserve to refuse clients
};

}  // namespace bexd::cli
