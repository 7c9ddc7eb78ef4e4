// SPDX-License-Identifier: GPL-2.0-or-later
// The reconnect loop of one nbd node. A connection that lost its server asks for a new one here;
// this thread connects (blocking, so never on a queue thread), checks that the server still
// serves the same export, and hands the new handle over. Attempts follow QEMU's connect thread:
// the first at once, then after 1, 2, 4, 8 and 16 s, and every 16 s from then on; each attempt
// is given up after kNbdConnectTimeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "block/nbd/nbd_handle.h"
#include "block/options.h"

namespace bexd::block {

// The pause before the next connection attempt after one failed: 1 s after the first failure
// (`previous` 0), then twice the previous pause, at most 16 s (QEMU's connect thread).
std::chrono::seconds NextNbdAttemptPause(std::chrono::seconds previous);

class NbdReconnectClient {
 public:
  // Runs on the connector's thread, under its lock: store the handle and wake the owner.
  virtual void Reconnected(NbdHandle handle) = 0;
  // Runs on another connection's thread, under the connector's lock: that connection learned
  // that the server is shutting down, which waits until every client has disconnected.
  virtual void ServerStopping() = 0;
  // Runs on the connector's thread, under its lock: an attempt failed while the client waited
  // (it stays queued for the next one).
  virtual void AttemptFailed() = 0;
  // Runs on another connection's thread, under the connector's lock: whether this connection
  // has writes acknowledged after the node's flush count `flushed` on a socket the server has
  // closed, which its own thread may notice only with its next request.
  virtual bool HoldsWritesOnLostSocket(uint64_t flushed) = 0;

 protected:
  ~NbdReconnectClient() = default;
};

class NbdConnector {
 public:
  // `opened` is what the server offered when the node was opened; a new connection must match it
  // (CheckSameExport).
  NbdConnector(std::string node_name, NbdOptions options, NbdServerInfo opened, bool writable,
               bool multi_conn);
  // Cancels an attempt under way and joins the thread.
  ~NbdConnector();
  NbdConnector(const NbdConnector&) = delete;
  NbdConnector& operator=(const NbdConnector&) = delete;

  // Queues `client` for the next connection that works (first come, first served).
  void Request(NbdReconnectClient* client);
  // Once this returns, the connector will not call `client` again.
  void Withdraw(NbdReconnectClient* client);
  // Every connection of the node, for AnnounceServerStopping().
  void Register(NbdReconnectClient* client);
  // Tells every registered connection but `from` that the server is shutting down.
  void AnnounceServerStopping(NbdReconnectClient* from);
  // Whether a registered connection but `from` holds writes after `flushed` on a lost socket.
  bool OthersHoldLostWrites(NbdReconnectClient* from, uint64_t flushed);

 private:
  void Loop();

  const std::string node_name_;
  const NbdOptions options_;
  const NbdServerInfo opened_;
  const bool writable_;
  const bool multi_conn_;
  int cancel_fd_ = -1;  // eventfd: ends a connection attempt at once when the node closes

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<NbdReconnectClient*> waiting_;
  std::vector<NbdReconnectClient*> registered_;
  bool stopping_ = false;
  std::thread thread_;  // started by the first Request
};

}  // namespace bexd::block
