// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_dev/fuse_export.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <linux/fuse.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <variant>

#include "export/fuse_uring/kernel_support.h"
#include "export/queue/queue_cpus.h"
#include "util/log.h"

namespace bexd::exports {
uint32_t DefaultFuseQueueCount() {
  return std::clamp<uint32_t>(static_cast<uint32_t>(AllowedCpus().size()), 1,
                              FuseExport::kMaxQueues);
}

absl::StatusOr<std::unique_ptr<FuseExport>> FuseExport::Start(
    const ExportOptions& options, std::shared_ptr<block::BlockNode> node,
    std::shared_ptr<fuse::Session> session, EndedFn on_ended) {
  const auto& fuse_options = std::get<FuseExportOptions>(options.transport);
  if (fuse_options.num_queues > kMaxQueues) {
    return absl::InvalidArgumentError(
        fmt::format("num-queues {} exceeds {}", fuse_options.num_queues, kMaxQueues));
  }
  uint32_t queue_count = fuse_options.num_queues;
  if (queue_count == 0) {
    queue_count = fuse_options.queue_cpus.empty()
                      ? DefaultFuseQueueCount()
                      : std::min<uint32_t>(fuse_options.queue_cpus.size(), kMaxQueues);
  }
  // Decided before the mount, so that INIT (sent at mount time) accepts io_uring only when the
  // rings will follow. The switch is read, never changed.
  bool io_uring = false;
  std::string io_uring_absent;  // why not, for the log
  if (fuse_options.io_uring != IoUringMode::kOff) {
    const FuseUringSupport support = ReadFuseUringSupport();
    if (!support.enabled && fuse_options.io_uring == IoUringMode::kOn) {
      return absl::FailedPreconditionError(
          fmt::format("io-uring=on, but {} ({}, or use io-uring=auto or off)", support.why_not,
                      support.remedy));
    }
    io_uring = support.enabled;
    io_uring_absent = support.why_not;
  }
  if (io_uring) session->EnableIoUring();

  std::string passthrough_off;
  absl::StatusOr<std::unique_ptr<fuse::Passthrough>> passthrough =
      PreparePassthrough(options, *node, &passthrough_off);
  if (!passthrough.ok()) return passthrough.status();

  absl::StatusOr<MountpointClaim> claim = MountpointClaim::Acquire(fuse_options.mountpoint);
  if (!claim.ok()) return claim.status();
  FuseMountOptions mount_options;
  mount_options.fs_name = node->node_name();
  mount_options.allow_other = fuse_options.allow_other;
  mount_options.max_read = session->options().max_write;
  mount_options.read_only = !options.writable;
  absl::StatusOr<FuseMount> mount = FuseMount::Create(claim->path(), mount_options);
  if (!mount.ok()) return mount.status();
  if (!mount->allow_other()) session->RestrictToOwner();
  // Over io_uring /dev/fuse carries only INIT, FORGET, INTERRUPT and requests from before the
  // rings were up: one queue is enough.
  absl::StatusOr<std::vector<util::UniqueFd>> devices =
      mount->OpenQueues(io_uring ? 1 : queue_count);
  if (!devices.ok()) return devices.status();

  std::unique_ptr<DeviceBackingFiles> backing_files;
  if (*passthrough != nullptr) {
    // A descriptor of its own, so that registering never depends on a queue's.
    util::UniqueFd device(fcntl((*devices)[0].get(), F_DUPFD_CLOEXEC, 0));
    if (!device) {
      return absl::ErrnoToStatus(errno, "duplicating the /dev/fuse descriptor for passthrough");
    }
    backing_files = std::make_unique<DeviceBackingFiles>(std::move(device));
    (*passthrough)->Attach(backing_files.get());
    session->SetPassthrough(std::move(*passthrough));
  }
  std::unique_ptr<FuseExport> fuse_export(new FuseExport(options, std::move(node),
                                                         std::move(session), std::move(*claim),
                                                         std::move(*mount), std::move(on_ended)));
  FuseExport& self = *fuse_export;
  self.backing_files_ = std::move(backing_files);
  absl::Status status = self.StartQueues(std::move(*devices), fuse_options.queue_cpus, io_uring);
  if (status.ok() && io_uring) {
    if (!self.WaitForInitReply()) {
      status = absl::UnavailableError("the kernel's FUSE INIT did not arrive");
    } else if (!self.session_->io_uring()) {
      // The switch was turned off between the check and the mount.
      io_uring = false;
      io_uring_absent = "the kernel's INIT did not offer it";
      if (fuse_options.io_uring == IoUringMode::kOn) {
        status = absl::FailedPreconditionError(
            fmt::format("io-uring=on, but {} ({} was switched off as bexd mounted)",
                        io_uring_absent, kFuseUringSwitch));
      }
    } else {
      status = self.StartRings(fuse_options.io_uring_queue_depth);
      if (!status.ok() && fuse_options.io_uring == IoUringMode::kAuto) {
        // A refused registration makes the kernel fall back to /dev/fuse for this connection.
        log::Warn("export '{}': {}; serving over /dev/fuse (one queue)", options.id,
                  std::string(status.message()));
        self.DropRings();
        io_uring = false;
        io_uring_absent = "the kernel refused the ring entries";
        status = absl::OkStatus();
      }
    }
  }
  if (status.ok() && self.session_->passthrough() != nullptr) {
    passthrough_off = self.CheckPassthrough();
    if (!passthrough_off.empty() && fuse_options.passthrough == PassthroughMode::kOn) {
      status = PassthroughImpossible(passthrough_off);
    }
  }
  // The queues may end on their own from here on.
  if (status.ok() && self.serving_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    status = absl::UnavailableError("the FUSE connection ended while the export was starting");
  }
  if (!status.ok()) {
    self.Stop();
    return status;
  }
  log::Info(
      "export '{}': node '{}' mounted on '{}' ({}, {}{}{}), passthrough {}", options.id,
      self.node()->node_name(), self.mountpoint_, options.writable ? "writable" : "read-only",
      io_uring
          ? fmt::format("{} io_uring queue{} of depth {} and 1 /dev/fuse queue", self.rings_.size(),
                        self.rings_.size() == 1 ? "" : "s", fuse_options.io_uring_queue_depth)
          : fmt::format("{} /dev/fuse queue{}", self.queues_.size(),
                        self.queues_.size() == 1 ? "" : "s"),
      DescribeQueueCpus(fuse_options.queue_cpus), self.mount_.allow_other() ? ", allow_other" : "",
      passthrough_off.empty() ? "on" : fmt::format("off: {}", passthrough_off));
  if (fuse_options.io_uring == IoUringMode::kAuto) {
    // Said once per export, so that a user of io-uring=auto sees which transport serves it.
    if (io_uring) {
      log::Info("export '{}': transport: FUSE over io_uring (io-uring=auto)", options.id);
    } else {
      log::Info("export '{}': transport: /dev/fuse (io-uring=auto: {})", options.id,
                io_uring_absent);
    }
  }
  return fuse_export;
}

FuseExport::FuseExport(const ExportOptions& options, std::shared_ptr<block::BlockNode> node,
                       std::shared_ptr<fuse::Session> session, MountpointClaim claim,
                       FuseMount mount, EndedFn on_ended)
    : Export(options.id, options.writable, std::move(node), std::move(on_ended)),
      mountpoint_(claim.path()),
      session_(std::move(session)),
      claim_(std::move(claim)),
      mount_(std::move(mount)) {}

FuseExport::~FuseExport() { Stop(); }

absl::Status FuseExport::StartQueues(std::vector<util::UniqueFd> devices,
                                     const std::vector<int>& cpus, bool io_uring) {
  queues_.reserve(devices.size());
  for (uint32_t i = 0; i < devices.size(); ++i) {
    absl::StatusOr<std::unique_ptr<FuseDeviceTransport>> transport = FuseDeviceTransport::Create(
        i, *session_, std::move(devices[i]), [this](uint32_t index, bool failed) {
          OnQueueExit(fmt::format("queue {}", index), failed);
        });
    if (!transport.ok()) return transport.status();
    // Any queue may carry INIT, and the kernel sends nothing else before INIT's reply.
    (*transport)->CallAfterInitReply([this] {
      std::lock_guard lock(init_mutex_);
      init_replied_ = true;
      init_changed_.notify_all();
    });
    absl::StatusOr<std::unique_ptr<QueueThread>> thread =
        QueueThread::Start(session_, {.label = fmt::format("export '{}' queue {}", id(), i),
                                      .thread_name = fmt::format("bexd-fuse-q{}", i),
                                      .cpu = QueueCpu(cpus, i)});
    if (!thread.ok()) return thread.status();
    queues_.push_back({std::move(*transport), std::move(*thread)});
  }
  for (Queue& queue : queues_) {
    absl::Status status =
        BeginServing(*queue.thread, queue.transport.get(), FuseDeviceTransport::kSlots);
    if (!status.ok()) return status;
  }
  if (serving_.load(std::memory_order_acquire) == 1) {
    return absl::UnavailableError("the FUSE connection ended while the export was starting");
  }
  return absl::OkStatus();
}

std::string FuseExport::CheckPassthrough() {
  fuse::Passthrough& passthrough = *session_->passthrough();
  std::string why_not;
  // The kernel turns passthrough on as it takes INIT's reply; registering a backing file before
  // that would fail.
  if (!WaitForInitReply()) {
    why_not = "the kernel's FUSE INIT was not answered";
  } else if (!passthrough.negotiated()) {
    why_not =
        "the kernel did not offer FUSE_PASSTHROUGH in INIT (it needs Linux 6.9 or later built "
        "with CONFIG_FUSE_PASSTHROUGH)";
  } else if (absl::Status status = passthrough.Probe(); !status.ok()) {
    why_not = std::string(status.message());
  }
  if (!why_not.empty()) passthrough.SetNegotiated(false);
  return why_not;
}

bool FuseExport::WaitForInitReply() {
  // The kernel sends INIT as it mounts, so it waits on a queue already; the limit only keeps a
  // broken kernel from hanging the start.
  std::unique_lock lock(init_mutex_);
  init_changed_.wait_for(lock, std::chrono::seconds(30),
                         [this] { return init_replied_ || init_wait_over_; });
  return init_replied_;
}

absl::Status FuseExport::StartRings(uint32_t depth) {
  absl::StatusOr<uint32_t> count = PossibleCpuCount();
  if (!count.ok()) return count.status();
  const std::vector<int> allowed = AllowedCpus();
  const int device = queues_.front().transport->device();
  rings_.reserve(*count);
  for (uint32_t cpu = 0; cpu < *count; ++cpu) {
    const auto queue = static_cast<uint16_t>(cpu);
    absl::StatusOr<std::unique_ptr<FuseRingTransport>> transport = FuseRingTransport::Create(
        queue, depth, *session_, device, [this](uint16_t index, bool failed) {
          OnQueueExit(fmt::format("io_uring queue {}", index), failed);
        });
    if (!transport.ok()) return transport.status();
    // The kernel puts a request on the queue of the CPU that issued it; serving it there keeps
    // the request on one CPU. A CPU this process may not use gets an unpinned thread.
    const bool may_pin = std::find(allowed.begin(), allowed.end(), int(cpu)) != allowed.end();
    absl::StatusOr<std::unique_ptr<QueueThread>> thread = QueueThread::Start(
        session_, {.label = fmt::format("export '{}' io_uring queue {}", id(), cpu),
                   .thread_name = fmt::format("bexd-ring-q{}", cpu),
                   .cpu = may_pin ? int(cpu) : -1});
    if (!thread.ok()) return thread.status();
    std::lock_guard lock(rings_mutex_);
    rings_.push_back({std::move(*transport), std::move(*thread)});
  }
  for (Ring& ring : rings_) {
    absl::Status status = BeginServing(*ring.thread, ring.transport.get(), depth);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status FuseExport::BeginServing(QueueThread& thread, QueueTransport* transport,
                                      uint32_t slots) {
  // Counted before the run begins: a queue that ends at once must find itself counted.
  serving_.fetch_add(1, std::memory_order_relaxed);
  absl::Status status = thread.BeginRun(transport, slots);
  if (!status.ok()) serving_.fetch_sub(1, std::memory_order_relaxed);
  return status;
}

void FuseExport::DropRings() {
  for (Ring& ring : rings_) ring.thread->Exit();
}

void FuseExport::OnQueueExit(const std::string& queue, bool failed) {
  {
    std::lock_guard lock(init_mutex_);
    init_wait_over_ = true;
    init_changed_.notify_all();
  }
  // When the connection ends every queue fails at once; one warning says it.
  if (failed && !stop_requested_.load(std::memory_order_acquire) &&
      !ending_.exchange(true, std::memory_order_acq_rel)) {
    log::Warn("export '{}': {} stopped serving; stopping the export", id(), queue);
    for (Queue& other : queues_) other.thread->RequestStop();
    std::lock_guard lock(rings_mutex_);
    for (Ring& ring : rings_) ring.thread->RequestStop();
  }
  // The last queue out cleans up unless Stop() is under way and will do it after joining, or the
  // export is still starting (its starter holds one count until it returns).
  if (serving_.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
      !stop_requested_.load(std::memory_order_acquire)) {
    TearDown();
    // An abort through /sys/fs/fuse/connections and a malformed request both leave the mount in
    // place; the queue's own message above tells them apart.
    ReportEnded(mount_.unmounted_from_outside()
                    ? fmt::format("'{}' was unmounted from outside", mountpoint_)
                    : "its FUSE connection was aborted or failed");
  }
}

void FuseExport::Stop() {
  std::lock_guard lock(stop_mutex_);
  stop_requested_.store(true, std::memory_order_release);
  for (Ring& ring : rings_) ring.thread->RequestStop();
  for (Queue& queue : queues_) queue.thread->RequestStop();
  for (Ring& ring : rings_) ring.thread->Exit();
  for (Queue& queue : queues_) queue.thread->Exit();
  TearDown();
}

void FuseExport::TearDown() {
  std::lock_guard lock(teardown_mutex_);
  if (torn_down_) return;
  torn_down_ = true;
  FlushAfterLastReply();
  if (fuse::Passthrough* passthrough = session_->passthrough(); passthrough != nullptr) {
    // Closing the backing id stops new passthrough opens; files open already keep their own
    // backing file, which the kernel cannot take back.
    if (const uint32_t open = passthrough->open_files(); open > 0 && session_->options().writable) {
      log::Warn(
          "export '{}': {} file(s) opened through passthrough are still open; they can "
          "still read and write the image after this stop, until their owners close them",
          id(), open);
    }
    passthrough->Detach();
  }
  mount_.Unmount();
  // Closing the last descriptor aborts the connection: requests that were never read (callers
  // of a lazily detached mount) fail instead of waiting forever.
  for (Queue& queue : queues_) queue.transport->CloseDevice();
  if (backing_files_ != nullptr) backing_files_->CloseDevice();
  claim_.Release();
  log::Info("export '{}': stopped; '{}' is unmounted", id(), mountpoint_);
}

bool FuseExport::in_use() const { return session_->open_handles() > 0; }

void FuseExport::DropCachedAttributes() {
  // Under the teardown lock, so that the descriptor stays open while it is written to. A
  // teardown that holds it is flushing an export that ends, which needs no notice: waiting for it
  // would hold the control thread for as long as storage that does not answer holds the flush.
  std::unique_lock lock(teardown_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || torn_down_ || queues_.empty()) return;
  struct {
    struct fuse_out_header header;
    struct fuse_notify_inval_inode_out body;
  } notice = {};
  notice.header.len = sizeof(notice);
  notice.header.error = FUSE_NOTIFY_INVAL_INODE;
  notice.body.ino = session_->file_node_id();
  notice.body.off = -1;  // the attributes only: the data the kernel caches is still valid
  if (::write(queues_[0].transport->device(), &notice, sizeof(notice)) < 0) {
    // Before INIT or after the connection ended there is nothing cached to drop.
    log::Debug("export '{}': cannot drop the kernel's cached attributes: {}", id(),
               std::strerror(errno));
  }
}

std::optional<Export::PassthroughStats> FuseExport::passthrough_stats() const {
  const fuse::Passthrough* passthrough = session_->passthrough();
  if (passthrough == nullptr) return PassthroughStats{};
  return PassthroughStats{.active = passthrough->negotiated(),
                          .open_files = passthrough->open_files(),
                          .opens = passthrough->opens()};
}

std::vector<fuse::QueueStatsSnapshot> FuseExport::Stats() const {
  std::vector<fuse::QueueStatsSnapshot> stats;
  stats.reserve(queues_.size() + rings_.size());
  for (const Queue& queue : queues_) stats.push_back(queue.thread->Stats());
  for (const Ring& ring : rings_) stats.push_back(ring.thread->Stats());
  return stats;
}

}  // namespace bexd::exports
