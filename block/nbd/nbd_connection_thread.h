// SPDX-License-Identifier: GPL-2.0-or-later
// The node's one shared connection, for a server that does not allow multi-conn: a thread of its
// own drives it, takes requests from every queue thread through a lock-free stack and an eventfd,
// and hands each finished request back to the queue that submitted it (NbdSharedQueue::Return),
// as the file driver's workers do.
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <thread>

#include "block/nbd/nbd_connection.h"
#include "block/request_stack.h"

namespace bexd::block {

class NbdConnectionThread {
 public:
  static absl::StatusOr<std::unique_ptr<NbdConnectionThread>> Start(const NbdNodeLink& link,
                                                                    NbdHandle handle);
  // Stops and joins the thread; every queue has gone (and got its requests back) by then.
  ~NbdConnectionThread();
  NbdConnectionThread(const NbdConnectionThread&) = delete;
  NbdConnectionThread& operator=(const NbdConnectionThread&) = delete;

  // Any thread: passes the request on; Wake() once after a batch whose Hand() returned true.
  bool Hand(IoRequest* request) { return inbox_.Push(request); }
  void Wake();

 private:
  NbdConnectionThread() = default;
  void Loop();
  static void OnFinished(void* context, IoRequest* request, int64_t result);

  std::unique_ptr<NbdConnection> connection_;
  RequestStack inbox_;
  int inbox_fd_ = -1;
  int stop_fd_ = -1;
  int epoll_fd_ = -1;
  std::thread thread_;
};

}  // namespace bexd::block
