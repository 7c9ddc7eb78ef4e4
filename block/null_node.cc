// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/null_node.h"

#include <fmt/format.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "block/iov_util.h"
#include "block/request_check.h"
#include "block/request_list.h"
#include "util/clock.h"

namespace bexd::block {
namespace {

struct NullState : RequestLink {
  uint64_t deadline_ns = 0;
  int64_t result = 0;
};

class NullNode;

// Every request goes through one FIFO. Without latency its deadline is 0 and the next Poll()
// completes it; with latency a timerfd armed for the head's deadline wakes the thread. All
// requests of a queue have the same latency, so deadlines never decrease along the FIFO.
class NullQueue final : public IoQueue {
 public:
  NullQueue(std::shared_ptr<const NullNode> node, int timer_fd)
      : node_(std::move(node)), timer_fd_(timer_fd) {}
  ~NullQueue() override {
    if (timer_fd_ >= 0) close(timer_fd_);
  }

  void Submit(IoRequest* request) override;
  void Poll() override;
  int event_fd() const override { return timer_fd_; }
  uint32_t in_flight() const override { return in_flight_; }

 private:
  int64_t Execute(IoRequest* request) const;
  void TakeDue(RequestList* due);
  void ArmTimer(uint64_t deadline_ns);

  std::shared_ptr<const NullNode> node_;
  int timer_fd_;
  RequestList waiting_;
  uint64_t armed_deadline_ns_ = 0;
  uint32_t in_flight_ = 0;
};

class NullNode final : public BlockNode, public std::enable_shared_from_this<NullNode> {
 public:
  NullNode(std::string node_name, const NullOptions& options, bool read_only)
      : BlockNode(std::move(node_name)), options_(options), read_only_(read_only) {}

  std::string driver_name() const override { return "null-co"; }
  uint64_t size() const override { return options_.size; }
  bool read_only() const override { return read_only_; }
  // It stores nothing: nothing to free, nothing volatile to flush, no size of its own to change.
  Capabilities capabilities() const override {
    Capabilities capabilities;
    capabilities.discard = false;
    capabilities.flush = false;
    capabilities.resize = false;
    return capabilities;
  }
  absl::Status Truncate(uint64_t new_size) override {
    return absl::PermissionDeniedError(
        fmt::format("node '{}': the null driver cannot be resized", node_name()));
  }
  std::string description() const override {
    return fmt::format("null-co (size {}, read-zeroes {}, latency-ns {})", options_.size,
                       options_.read_zeroes ? "on" : "off", options_.latency_ns);
  }

  std::string filename() const override { return "null-co://"; }

  const NullOptions& options() const { return options_; }

 protected:
  absl::StatusOr<std::unique_ptr<IoQueue>> CreateDriverQueue() override {
    int timer_fd = -1;
    if (options_.latency_ns > 0) {
      timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
      if (timer_fd < 0) {
        return absl::ErrnoToStatus(
            errno, fmt::format("node '{}': cannot create the latency timer", node_name()));
      }
    }
    return std::make_unique<NullQueue>(shared_from_this(), timer_fd);
  }

 private:
  NullOptions options_;
  bool read_only_;
};

void NullQueue::Submit(IoRequest* request) {
  NullState* state = EmplaceDriverState<NullState>(request);
  state->result = Execute(request);
  if (node_->options().latency_ns > 0) {
    state->deadline_ns = util::MonotonicNs() + node_->options().latency_ns;
    if (waiting_.empty()) ArmTimer(state->deadline_ns);
  }
  waiting_.PushBack(request);
  ++in_flight_;
}

int64_t NullQueue::Execute(IoRequest* request) const {
  const NullOptions& options = node_->options();
  int error = CheckRequest(*request, options.size, node_->read_only());
  if (error != 0) return error;
  switch (request->op) {
    case IoOp::kFlush:
      return 0;
    case IoOp::kBlockStatus: {
      if (request->offset >= options.size) return 0;
      request->status_data = !options.read_zeroes;
      uint64_t rest = options.size - request->offset;
      return static_cast<int64_t>(request->length < rest ? request->length : rest);
    }
    default:
      return static_cast<int64_t>(request->length);
  }
}

// deadline_ns 0 disarms.
void NullQueue::ArmTimer(uint64_t deadline_ns) {
  struct itimerspec spec = {};
  spec.it_value.tv_sec = static_cast<time_t>(deadline_ns / 1'000'000'000u);
  spec.it_value.tv_nsec = static_cast<long>(deadline_ns % 1'000'000'000u);
  // Cannot fail for a valid timerfd and an absolute time; a deadline already past fires at once.
  timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
  armed_deadline_ns_ = deadline_ns;
}

void NullQueue::Poll() {
  // Without a timer nobody would wake the thread for requests the callbacks submit, so those
  // complete in this same call.
  while (!waiting_.empty()) {
    RequestList due;
    if (timer_fd_ < 0) {
      due.Splice(waiting_);
    } else {
      TakeDue(&due);
    }
    while (IoRequest* request = due.PopFront()) {
      int64_t result = DriverState<NullState>(request)->result;
      if (request->op == IoOp::kRead && result > 0 && node_->options().read_zeroes) {
        ZeroIovFrom(request->iov, request->iovcnt, 0);
      }
      --in_flight_;
      request->done(request, result);
    }
    if (timer_fd_ >= 0) break;
  }
}

void NullQueue::TakeDue(RequestList* due) {
  uint64_t expirations;
  // Clears the readable state; EAGAIN just means the timer has not fired since the last read.
  bool fired = read(timer_fd_, &expirations, sizeof(expirations)) > 0;
  uint64_t now = util::MonotonicNs();
  while (!waiting_.empty() && DriverState<NullState>(waiting_.front())->deadline_ns <= now) {
    due->PushBack(waiting_.PopFront());
  }
  if (!waiting_.empty()) {
    uint64_t head_deadline = DriverState<NullState>(waiting_.front())->deadline_ns;
    if (fired || head_deadline != armed_deadline_ns_) ArmTimer(head_deadline);
  } else if (!fired) {
    // The timer may still fire for a request taken early; disarm it so the fd does not stay
    // readable while nothing waits (Poll() returns at once then and would never clear it).
    ArmTimer(0);
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<BlockNode>> OpenNullNode(std::string node_name,
                                                        const NullOptions& options,
                                                        bool read_only) {
  return std::make_shared<NullNode>(std::move(node_name), options, read_only);
}

}  // namespace bexd::block
