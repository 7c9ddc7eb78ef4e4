// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/nbd/nbd_connector.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <system_error>

#include "util/eventfd.h"
#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::block {
namespace {

constexpr std::chrono::seconds kFirstPause{1};
constexpr std::chrono::seconds kLongestPause{16};

}  // namespace

std::chrono::seconds NextNbdAttemptPause(std::chrono::seconds previous) {
  return previous.count() == 0 ? kFirstPause : std::min(previous * 2, kLongestPause);
}

NbdConnector::NbdConnector(std::string node_name, NbdOptions options, NbdServerInfo opened,
                           bool writable, bool multi_conn)
    : node_name_(std::move(node_name)),
      options_(std::move(options)),
      opened_(opened),
      writable_(writable),
      multi_conn_(multi_conn),
      cancel_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

NbdConnector::~NbdConnector() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (cancel_fd_ >= 0) util::SignalEventFd(cancel_fd_);
  if (thread_.joinable()) thread_.join();
  if (cancel_fd_ >= 0) close(cancel_fd_);
}

void NbdConnector::Request(NbdReconnectClient* client) {
  std::lock_guard lock(mutex_);
  if (std::find(waiting_.begin(), waiting_.end(), client) == waiting_.end()) {
    waiting_.push_back(client);
  }
  if (!thread_.joinable()) {
    try {
      thread_ = std::thread([this] { Loop(); });
      pthread_setname_np(thread_.native_handle(), "bexd-nbd-conn");
    } catch (const std::system_error& error) {
      // Requests then fail with EIO once the reconnect delay is over, as while the server is away.
      log::Error("node '{}': cannot start the NBD reconnect thread: {}", node_name_, error.what());
      return;
    }
  }
  wake_.notify_all();
}

void NbdConnector::Withdraw(NbdReconnectClient* client) {
  std::lock_guard lock(mutex_);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), client), waiting_.end());
  registered_.erase(std::remove(registered_.begin(), registered_.end(), client), registered_.end());
}

void NbdConnector::Register(NbdReconnectClient* client) {
  std::lock_guard lock(mutex_);
  registered_.push_back(client);
}

void NbdConnector::AnnounceServerStopping(NbdReconnectClient* from) {
  std::lock_guard lock(mutex_);
  for (NbdReconnectClient* client : registered_) {
    if (client != from) client->ServerStopping();
  }
}

bool NbdConnector::OthersHoldLostWrites(NbdReconnectClient* from, uint64_t flushed) {
  std::lock_guard lock(mutex_);
  return std::any_of(registered_.begin(), registered_.end(), [&](NbdReconnectClient* client) {
    return client != from && client->HoldsWritesOnLostSocket(flushed);
  });
}

void NbdConnector::Loop() {
  static log::RateLimit failed_attempt;
  const std::string address = NbdAddress(options_);
  std::chrono::seconds pause{0};
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
    if (stopping_) return;
    lock.unlock();
    absl::StatusOr<NbdHandle> handle = ConnectNbd(options_, cancel_fd_, kNbdConnectTimeout);
    absl::Status usable = handle.status();
    if (handle.ok()) {
      usable = CheckSameExport(opened_, ReadServerInfo(handle->get()), writable_, multi_conn_);
    }
    lock.lock();
    if (stopping_) return;
    if (usable.ok()) {
      pause = std::chrono::seconds(0);
      // Nobody may be waiting any more (a queue that went away); the handle then just closes.
      if (!waiting_.empty()) {
        NbdReconnectClient* client = waiting_.front();
        waiting_.pop_front();
        client->Reconnected(*std::move(handle));
      }
      continue;
    }
    for (NbdReconnectClient* client : waiting_) client->AttemptFailed();
    pause = NextNbdAttemptPause(pause);
    log::Limited(failed_attempt, log::Level::kWarn,
                 "node '{}': reconnecting to NBD server {} failed: {}; next attempt in {} s",
                 node_name_, address, std::string(usable.message()), pause.count());
    wake_.wait_for(lock, pause, [&] { return stopping_ || waiting_.empty(); });
    if (waiting_.empty()) pause = std::chrono::seconds(0);
  }
}

}  // namespace bexd::block
