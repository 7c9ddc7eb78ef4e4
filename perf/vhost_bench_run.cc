// SPDX-License-Identifier: GPL-2.0-or-later
#include "perf/vhost_bench_run.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "vhost_frontend/frontend.h"

namespace bexd::perf {
namespace {

using Clock = std::chrono::steady_clock;
using test::vhost::Completion;
using test::vhost::Frontend;

constexpr uint32_t kHistogramMicros = 65536;  // 1 µs buckets; the last one holds everything slower

struct Window {
  Clock::time_point measure_from;
  Clock::time_point until;
};

struct OpenFile {
  uint64_t node_id = 0;
  uint64_t handle = 0;
  uint64_t size = 0;
};

struct RingTally {
  uint64_t requests = 0;
  uint64_t latency_ns_total = 0;
  std::vector<uint32_t> histogram = std::vector<uint32_t>(kHistogramMicros);
  absl::Status status;
};

std::string ReplyError(int32_t error) {
  return error < 0 ? std::strerror(-error) : fmt::format("positive error {}", error);
}

absl::StatusOr<OpenFile> Open(Frontend& frontend, const VhostBenchOptions& options) {
  OpenFile file;
  const std::string& name = options.file_name;
  absl::StatusOr<test::vhost::FuseReply> lookup =
      frontend.Fuse(1, FUSE_LOOKUP, FUSE_ROOT_ID, name.c_str(), name.size() + 1);
  if (!lookup.ok()) return lookup.status();
  if (lookup->header.error != 0 || lookup->payload.size() < sizeof(fuse_entry_out)) {
    return absl::NotFoundError(fmt::format("LOOKUP of '{}' in the virtio-fs root failed: {}", name,
                                           ReplyError(lookup->header.error)));
  }
  fuse_entry_out entry;
  memcpy(&entry, lookup->payload.data(), sizeof(entry));
  file.node_id = entry.nodeid;
  file.size = entry.attr.size;
  if (file.size < options.block_size) {
    return absl::FailedPreconditionError(fmt::format(
        "'{}' has {} bytes, less than one {}-byte request", name, file.size, options.block_size));
  }
  fuse_open_in open_in = {};
  open_in.flags = (IsWrite(options.pattern) ? O_RDWR : O_RDONLY) | (options.direct ? O_DIRECT : 0);
  absl::StatusOr<test::vhost::FuseReply> open =
      frontend.Fuse(1, FUSE_OPEN, file.node_id, &open_in, sizeof(open_in));
  if (!open.ok()) return open.status();
  if (open->header.error != 0 || open->payload.size() < sizeof(fuse_open_out)) {
    return absl::PermissionDeniedError(
        fmt::format("OPEN of '{}' failed: {}", name, ReplyError(open->header.error)));
  }
  fuse_open_out out;
  memcpy(&out, open->payload.data(), sizeof(out));
  file.handle = out.fh;
  return file;
}

// Drives one request ring until the window ends, then waits for what is still in flight.
class RingDriver {
 public:
  RingDriver(Frontend& frontend, const VhostBenchOptions& options, const OpenFile& file,
             uint32_t ring, std::atomic<bool>& failed)
      : frontend_(frontend),
        options_(options),
        file_(file),
        ring_(ring),
        failed_(failed),
        blocks_(file.size / options.block_size),
        submitted_at_(options.iodepth),
        offsets_(options.iodepth),
        data_(IsWrite(options.pattern) ? options.block_size : 0, 0x5a) {
    // Sequential rings start apart so that they do not all walk the same blocks.
    next_block_ = blocks_ * (ring - 1) / options.request_queues;
    random_state_ = 0x9e3779b97f4a7c15ull * ring ^ Clock::now().time_since_epoch().count();
  }

  RingTally Run(const Window& window) {
    RingTally tally;
    tally.status = Drive(window, tally);
    if (!tally.status.ok()) failed_ = true;
    return tally;
  }

 private:
  absl::Status Drive(const Window& window, RingTally& tally) {
    uint32_t in_flight = 0;
    for (; in_flight < options_.iodepth; ++in_flight) {
      if (absl::Status status = SubmitOne(); !status.ok()) return status;
    }
    while (in_flight > 0) {
      absl::StatusOr<std::vector<Completion>> done = frontend_.WaitCompletions(ring_);
      if (!done.ok()) {
        return absl::Status(
            done.status().code(),
            fmt::format("ring {}: {}", ring_, std::string(done.status().message())));
      }
      const Clock::time_point now = Clock::now();
      // Every reply of the batch is read before any slot is reused: the frontend has already
      // marked them all free, and a new request would overwrite a reply not yet checked.
      for (const Completion& completion : *done) {
        if (absl::Status status = Check(completion); !status.ok()) return status;
        if (now >= window.measure_from && now < window.until) {
          const uint64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  now - submitted_at_[completion.slot])
                                  .count();
          ++tally.requests;
          tally.latency_ns_total += ns;
          ++tally.histogram[std::min<uint64_t>(ns / 1000, kHistogramMicros - 1)];
        }
      }
      if (now >= window.until || failed_) {
        in_flight -= static_cast<uint32_t>(done->size());
        continue;
      }
      for (size_t i = 0; i < done->size(); ++i) {
        if (absl::Status status = SubmitOne(); !status.ok()) return status;
      }
    }
    return absl::OkStatus();
  }

  uint64_t NextOffset() {
    uint64_t block;
    if (IsRandom(options_.pattern)) {
      // xorshift64*: cheap, and good enough to spread requests over the file.
      random_state_ ^= random_state_ >> 12;
      random_state_ ^= random_state_ << 25;
      random_state_ ^= random_state_ >> 27;
      block = (random_state_ * 0x2545f4914f6cdd1dull) % blocks_;
    } else {
      block = next_block_;
      next_block_ = (next_block_ + 1) % blocks_;
    }
    return block * options_.block_size;
  }

  absl::Status SubmitOne() {
    const uint64_t offset = NextOffset();
    absl::StatusOr<int> slot;
    if (IsWrite(options_.pattern)) {
      fuse_write_in in = {};
      in.fh = file_.handle;
      in.offset = offset;
      in.size = options_.block_size;
      slot = frontend_.Submit(ring_, FUSE_WRITE, file_.node_id, &in, sizeof(in), data_.data(),
                              data_.size(), sizeof(fuse_out_header) + sizeof(fuse_write_out));
    } else {
      fuse_read_in in = {};
      in.fh = file_.handle;
      in.offset = offset;
      in.size = options_.block_size;
      slot = frontend_.Submit(ring_, FUSE_READ, file_.node_id, &in, sizeof(in), nullptr, 0,
                              sizeof(fuse_out_header) + options_.block_size);
    }
    if (!slot.ok()) {
      return absl::Status(slot.status().code(),
                          fmt::format("ring {}: submitting a request failed: {}", ring_,
                                      std::string(slot.status().message())));
    }
    offsets_[*slot] = offset;
    submitted_at_[*slot] = Clock::now();
    return absl::OkStatus();
  }

  // A request counts only if the backend did all of it.
  absl::Status Check(const Completion& completion) const {
    const char* what = IsWrite(options_.pattern) ? "WRITE" : "READ";
    const uint64_t offset = offsets_[completion.slot];
    if (completion.written < sizeof(fuse_out_header)) {
      return absl::DataLossError(fmt::format("ring {}: {} at offset {}: reply of {} bytes", ring_,
                                             what, offset, completion.written));
    }
    const unsigned char* reply = frontend_.ReplyBytes(ring_, completion);
    fuse_out_header header;
    memcpy(&header, reply, sizeof(header));
    if (header.error != 0) {
      return absl::InternalError(fmt::format("ring {}: {} at offset {} failed: {}", ring_, what,
                                             offset, ReplyError(header.error)));
    }
    uint64_t done = completion.written - sizeof(fuse_out_header);
    if (IsWrite(options_.pattern)) {
      fuse_write_out out = {};
      if (done >= sizeof(out)) memcpy(&out, reply + sizeof(header), sizeof(out));
      done = out.size;
    }
    if (done != options_.block_size) {
      return absl::DataLossError(fmt::format("ring {}: {} at offset {} did {} of {} bytes", ring_,
                                             what, offset, done, options_.block_size));
    }
    return absl::OkStatus();
  }

  Frontend& frontend_;
  const VhostBenchOptions& options_;
  const OpenFile& file_;
  const uint32_t ring_;
  std::atomic<bool>& failed_;
  const uint64_t blocks_;
  std::vector<Clock::time_point> submitted_at_;  // per slot
  std::vector<uint64_t> offsets_;                // per slot, for error messages
  const std::vector<unsigned char> data_;        // what every WRITE carries
  uint64_t next_block_ = 0;
  uint64_t random_state_ = 0;
};

double CpuSeconds(const struct timeval& time) { return time.tv_sec + time.tv_usec / 1e6; }

double Percentile(const std::vector<uint32_t>& histogram, uint64_t total, double fraction) {
  const uint64_t rank = static_cast<uint64_t>(fraction * static_cast<double>(total));
  uint64_t seen = 0;
  for (uint32_t micros = 0; micros < histogram.size(); ++micros) {
    seen += histogram[micros];
    if (seen > rank) return micros + 0.5;
  }
  return kHistogramMicros;
}

}  // namespace

absl::StatusOr<VhostBenchResult> RunVhostBench(const VhostBenchOptions& options) {
  test::vhost::FrontendOptions frontend_options;
  frontend_options.socket_path = options.socket_path;
  frontend_options.request_queues = options.request_queues;
  frontend_options.max_in_flight = options.iodepth;
  frontend_options.queue_size = std::max<uint32_t>(128, 4 * options.iodepth);
  // Per slot: the frontend's indirect table, the request with its data, the reply.
  frontend_options.slot_buffer_bytes =
      (3 * 4096 + 2 * size_t{options.block_size} + 4095) / 4096 * 4096;
  absl::StatusOr<std::unique_ptr<Frontend>> frontend = Frontend::Connect(frontend_options);
  if (!frontend.ok()) return frontend.status();
  absl::StatusOr<struct fuse_init_out> init = (*frontend)->Init();
  if (!init.ok()) return init.status();
  absl::StatusOr<OpenFile> file = Open(**frontend, options);
  if (!file.ok()) return file.status();

  std::atomic<bool> failed{false};
  std::vector<RingDriver> drivers;
  drivers.reserve(options.request_queues);
  for (uint32_t ring = 1; ring <= options.request_queues; ++ring) {
    drivers.emplace_back(**frontend, options, *file, ring, failed);
  }
  const auto to_duration = [](double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  Window window;
  window.measure_from = Clock::now() + to_duration(options.ramp_s);
  window.until = window.measure_from + to_duration(options.runtime_s);
  std::vector<RingTally> tallies(options.request_queues);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < options.request_queues; ++i) {
    threads.emplace_back([&, i] { tallies[i] = drivers[i].Run(window); });
  }
  std::this_thread::sleep_until(window.measure_from);
  struct rusage before = {};
  getrusage(RUSAGE_SELF, &before);
  std::this_thread::sleep_until(window.until);
  struct rusage after = {};
  getrusage(RUSAGE_SELF, &after);
  for (std::thread& thread : threads) thread.join();

  VhostBenchResult result;
  result.seconds = options.runtime_s;
  std::vector<uint32_t> histogram(kHistogramMicros);
  uint64_t latency_ns_total = 0;
  for (const RingTally& tally : tallies) {
    if (!tally.status.ok()) return tally.status;
    result.requests += tally.requests;
    result.requests_per_ring.push_back(tally.requests);
    latency_ns_total += tally.latency_ns_total;
    for (uint32_t i = 0; i < kHistogramMicros; ++i) histogram[i] += tally.histogram[i];
  }
  if (result.requests > 0) {
    result.latency_mean_us = latency_ns_total / 1000.0 / result.requests;
    result.latency_p99_us = Percentile(histogram, result.requests, 0.99);
  }
  result.client_user_pct =
      (CpuSeconds(after.ru_utime) - CpuSeconds(before.ru_utime)) / result.seconds * 100;
  result.client_system_pct =
      (CpuSeconds(after.ru_stime) - CpuSeconds(before.ru_stime)) / result.seconds * 100;
  return result;
}

}  // namespace bexd::perf
