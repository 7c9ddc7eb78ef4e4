// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/flush_node.h"

#include <errno.h>
#include <poll.h>
#include <time.h>

#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "util/log.h"

namespace bexd::exports {
namespace {

struct FlushResult {
  bool done = false;
  int64_t result = 0;
};

void OnFlushDone(block::IoRequest* request, int64_t result) {
  auto* flush = static_cast<FlushResult*>(request->opaque);
  flush->result = result;
  flush->done = true;
}

}  // namespace

absl::Status FlushNode(block::BlockNode& node) {
  absl::StatusOr<std::unique_ptr<block::IoQueue>> queue = node.CreateQueue();
  if (!queue.ok()) {
    return absl::Status(queue.status().code(),
                        fmt::format("cannot flush node '{}': {}", node.node_name(),
                                    std::string(queue.status().message())));
  }
  FlushResult flush;
  block::IoRequest request;
  request.op = block::IoOp::kFlush;
  request.done = &OnFlushDone;
  request.opaque = &flush;
  (*queue)->Submit(&request);
  // The request lives on this stack frame, so the wait has no deadline: a driver completes every
  // request. A stuck backend is reported rather than abandoned.
  int waited_ms = 0;
  while (true) {
    (*queue)->Poll();
    if (flush.done) break;
    const int fd = (*queue)->event_fd();
    if (fd >= 0) {
      struct pollfd pfd = {fd, POLLIN, 0};
      if (::poll(&pfd, 1, 1000) == 0) waited_ms += 1000;
    } else {
      const struct timespec pause = {0, 1000000};
      ::nanosleep(&pause, nullptr);
      waited_ms += 1;
    }
    if (waited_ms >= 10000) {
      log::Warn("flushing node '{}' has taken over 10 s; still waiting", node.node_name());
      waited_ms = 0;
    }
  }
  if (flush.result < 0) {
    return absl::DataLossError(fmt::format("flushing node '{}' failed: {}", node.node_name(),
                                           std::strerror(static_cast<int>(-flush.result))));
  }
  return absl::OkStatus();
}

}  // namespace bexd::exports
