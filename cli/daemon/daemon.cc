// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/daemon.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <system_error>
#include <thread>
#include <variant>

#include "block/objects.h"
#include "cli/daemon/block_query.h"
#include "export/start.h"
#include "util/log.h"

namespace bexd::cli {
namespace {

using nlohmann::json;

// How long a safe delete waits for the releases of files already closed: the kernel sends FUSE
// RELEASE in the background after close() has returned.
constexpr std::chrono::milliseconds kReleaseGrace{500};

// How long block-export-del waits for the export to stop before it replies and lets it stop in the
// background.
constexpr std::chrono::milliseconds kDeleteWait{1000};

// Polls `condition` until it holds or `limit` has passed; whether it holds. For the main thread's
// short waits on what an export's own threads (or the kernel) finish.
template <typename Condition>
bool PollFor(Condition condition, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Paths are compared in this form, so two spellings of one file count as one.
std::string CanonicalPath(const std::string& path) {
  std::error_code error;
  std::filesystem::path canonical = std::filesystem::weakly_canonical(path, error);
  return error ? path : canonical.string();
}

// The file or socket an export occupies; no two exports or monitors may share one.
std::string Endpoint(const ExportSpec& spec) {
  const std::string* path = std::visit(
      [](const auto& transport) -> const std::string* {
        if constexpr (std::is_same_v<std::decay_t<decltype(transport)>,
                                     exports::FuseExportOptions>) {
          return &transport.mountpoint;
        } else {
          return &transport.socket_path;
        }
      },
      spec.options.transport);
  return CanonicalPath(*path);
}

absl::Status ExportError(std::string_view id, std::string_view message) {
  return absl::InvalidArgumentError(fmt::format("export '{}': {}", id, message));
}

json StatsJson(const fuse::QueueStatsSnapshot& stats) {
  return {
      {"requests", stats.requests},
      {"read-requests", stats.read_requests},
      {"write-requests", stats.write_requests},
      {"bytes-read", stats.bytes_read},
      {"bytes-written", stats.bytes_written},
      {"errors", stats.errors},
      {"in-flight", stats.in_flight},
      {"latency-us",
       {{"p50", stats.LatencyPercentileUs(50)},
        {"p90", stats.LatencyPercentileUs(90)},
        {"p99", stats.LatencyPercentileUs(99)},
        {"p99.9", stats.LatencyPercentileUs(99.9)}}},
  };
}

void Accumulate(const fuse::QueueStatsSnapshot& queue, fuse::QueueStatsSnapshot* total) {
  total->requests += queue.requests;
  total->read_requests += queue.read_requests;
  total->write_requests += queue.write_requests;
  total->bytes_read += queue.bytes_read;
  total->bytes_written += queue.bytes_written;
  total->errors += queue.errors;
  total->in_flight += queue.in_flight;
  for (int i = 0; i < fuse::QueueStats::kLatencyBuckets; ++i) {
    total->latency_us[i] += queue.latency_us[i];
  }
}

}  // namespace

Daemon::Daemon(std::vector<IothreadObject> iothreads) : iothreads_(std::move(iothreads)) {}

Daemon::~Daemon() { StopAllExports(nullptr); }

const Daemon::LiveExport* Daemon::FindExport(std::string_view id) const {
  for (const LiveExport& live : exports_) {
    if (live.spec.options.id == id) return &live;
  }
  return nullptr;
}

absl::Status Daemon::AddBlockdev(const block::BlockdevOptions& options) {
  return graph_.Add(options);
}

absl::Status Daemon::DeleteBlockdev(std::string_view node_name) {
  // QEMU's first check and error: a node a block backend (here: an export) uses.
  for (const LiveExport& live : exports_) {
    if (live.spec.options.node_name == node_name) {
      return absl::FailedPreconditionError(fmt::format("Node {} is in use", node_name));
    }
  }
  return graph_.Delete(node_name);
}

absl::Status Daemon::CheckNewExport(const ExportSpec& spec,
                                    std::span<const ExportSpec> also_new) const {
  const exports::ExportOptions& options = spec.options;
  bool duplicate_id = FindExport(options.id) != nullptr;
  std::string endpoint = Endpoint(spec);
  const ExportSpec* endpoint_owner = nullptr;
  for (const LiveExport& live : exports_) {
    if (live.endpoint == endpoint) endpoint_owner = &live.spec;
  }
  for (const ExportSpec& other : also_new) {
    if (other.options.id == options.id) duplicate_id = true;
    if (Endpoint(other) == endpoint) endpoint_owner = &other;
  }
  if (duplicate_id) {
    // QEMU's words: scripts match them.
    return absl::InvalidArgumentError(
        fmt::format("Block export id '{}' is already in use", options.id));
  }
  if (endpoint_owner != nullptr) {
    const auto* mount = std::get_if<exports::FuseExportOptions>(&options.transport);
    if (mount != nullptr &&
        std::holds_alternative<exports::FuseExportOptions>(endpoint_owner->options.transport)) {
      // QEMU's words (iotest 308 matches them), with the path as given.
      return absl::InvalidArgumentError(
          fmt::format("There already is a FUSE export on '{}'", mount->mountpoint));
    }
    return ExportError(options.id, fmt::format("'{}' is already used by export '{}'", endpoint,
                                               endpoint_owner->options.id));
  }
  if (std::find(monitor_paths_.begin(), monitor_paths_.end(), endpoint) != monitor_paths_.end()) {
    return ExportError(options.id, fmt::format("'{}' is already used by a QMP monitor", endpoint));
  }
  const block::BlockGraph::Entry* node = graph_.Find(options.node_name);
  // QEMU's words for these two, which scripts match.
  if (node == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("Cannot find device='' nor node-name='{}'", options.node_name));
  }
  if (options.writable && node->node->read_only()) {
    return absl::InvalidArgumentError("Cannot export read-only node as writable");
  }
  absl::Status allowed = graph_.CheckExport(options.node_name, options.id, options.writable);
  if (!allowed.ok()) return allowed;
  for (const std::string& iothread : spec.iothreads) {
    if (!HasIothread(iothread)) {
      return ExportError(options.id, fmt::format("iothread '{}' does not name an --object "
                                                 "iothread",
                                                 iothread));
    }
  }
  return absl::OkStatus();
}

absl::Status Daemon::AddMonitorPath(const std::string& path) {
  std::string canonical = CanonicalPath(path);
  if (std::find(monitor_paths_.begin(), monitor_paths_.end(), canonical) != monitor_paths_.end()) {
    return absl::InvalidArgumentError(
        fmt::format("monitor socket '{}' is already used by another monitor", canonical));
  }
  for (const LiveExport& live : exports_) {
    if (live.endpoint == canonical) {
      return absl::InvalidArgumentError(fmt::format(
          "monitor socket '{}' is already used by export '{}'", canonical, live.spec.options.id));
    }
  }
  monitor_paths_.push_back(std::move(canonical));
  return absl::OkStatus();
}

absl::Status Daemon::CheckNewExports(std::span<const ExportSpec> specs) const {
  for (size_t i = 0; i < specs.size(); ++i) {
    absl::Status status = CheckNewExport(specs[i], specs.first(i));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status Daemon::AddExport(const ExportSpec& spec) {
  absl::Status status = CheckNewExport(spec, {});
  if (!status.ok()) return status;
  std::string endpoint = Endpoint(spec);
  absl::StatusOr<std::unique_ptr<exports::Export>> running =
      exports::StartExport(spec.options, graph_.Find(spec.options.node_name)->node, export_ended_);
  if (!running.ok()) return running.status();
  graph_.Retain(spec.options.node_name, spec.options.id, spec.options.writable);
  log::Debug("export '{}' ({}) serves node '{}' at {}", spec.options.id, (*running)->type(),
             spec.options.node_name, endpoint);
  exports_.push_back({spec, std::move(endpoint), *std::move(running)});
  return absl::OkStatus();
}

absl::Status Daemon::DeleteExport(std::string_view id, ExportDeleteMode mode) {
  auto it = std::find_if(exports_.begin(), exports_.end(),
                         [&](const LiveExport& live) { return live.spec.options.id == id; });
  if (it == exports_.end()) {
    return absl::NotFoundError(fmt::format("Export '{}' is not found", id));
  }
  if (it->deleting()) {
    return absl::FailedPreconditionError(fmt::format("Export '{}' is already shutting down", id));
  }
  // An export ending on its own keeps counting the files open when its connection went, and none
  // of them can reach it any more.
  const exports::Export& exported = *it->running;
  if (mode == ExportDeleteMode::kSafe &&
      !PollFor([&] { return exported.ending() || !exported.in_use(); }, kReleaseGrace)) {
    return absl::FailedPreconditionError(
        fmt::format("export '{}' is in use; close it first or use mode=hard", id));
  }
  it->stopped = std::make_shared<std::atomic<bool>>(false);
  try {
    it->stopper =
        std::thread([running = it->running.get(), stopped = it->stopped, done = export_ended_] {
          running->Stop();
          stopped->store(true, std::memory_order_release);
          if (done) done();
        });
  } catch (const std::system_error&) {
    // No thread to spare: stop it here, as the only way left.
    it->running->Stop();
    it->stopped->store(true, std::memory_order_release);
  }
  // Most exports stop within milliseconds: then the export is gone before the reply (its event
  // follows the reply), so that a script may delete its node next. Storage that does not answer
  // leaves it shutting down in the background.
  std::atomic<bool>& stopped = *it->stopped;
  if (PollFor([&] { return stopped.load(std::memory_order_acquire); }, kDeleteWait)) {
    RemoveEndedExports();
  } else {
    log::Warn(
        "export '{}' is still stopping after {} ms (its node has not finished the requests "
        "in flight or the flush); it is removed once it has",
        id, kDeleteWait.count());
  }
  return absl::OkStatus();
}

void Daemon::RemoveEndedExports() {
  for (auto it = exports_.begin(); it != exports_.end();) {
    const bool deleted = it->deleting() && it->stopped->load(std::memory_order_acquire);
    if (!deleted && (it->deleting() || !it->running->ended())) {
      ++it;
      continue;
    }
    std::string id = it->spec.options.id;
    if (deleted) {
      log::Info("export '{}' removed", id);
    } else {
      log::Warn("export '{}' ended on its own ({}); removed it", id, it->running->ended_reason());
    }
    // Joins the queue threads (the last one may still be returning from the ended callback), so
    // the export is destroyed here, never on one of its own threads.
    it = RemoveExport(it);
    if (export_deleted_) export_deleted_(id);
  }
}

std::vector<Daemon::LiveExport>::iterator Daemon::RemoveExport(
    std::vector<LiveExport>::iterator it) {
  it->running->Stop();
  if (it->stopper.joinable()) it->stopper.join();
  std::string node_name = it->spec.options.node_name;
  std::string id = it->spec.options.id;
  if (it->running->stop_flush_failed()) stop_flush_failures_.push_back(id);
  it = exports_.erase(it);
  graph_.Release(node_name, id);
  return it;
}

void Daemon::StopAllExports(const std::function<void(const std::string&)>& announce) {
  // Each on a thread of its own: storage that does not answer keeps its own export from stopping,
  // never the final flush of the others (one after the other, a hung node stopped first left the
  // rest unflushed, and a second signal then exited without their writes; outside audit).
  std::vector<std::thread> stoppers;
  for (LiveExport& live : exports_) {
    if (live.deleting()) continue;  // its own stopper runs already
    try {
      stoppers.emplace_back([running = live.running.get()] { running->Stop(); });
    } catch (const std::system_error&) {
      live.running->Stop();  // no thread to spare
    }
  }
  for (std::thread& stopper : stoppers) stopper.join();
  while (!exports_.empty()) {
    std::string id = exports_.back().spec.options.id;
    RemoveExport(exports_.end() - 1);
    log::Debug("export '{}' stopped", id);
    if (announce) announce(id);
  }
}

namespace {

absl::Status DuplicateObject(std::string_view id) {
  // QEMU's words: the object would be a second child of the same name in /objects.
  return absl::AlreadyExistsError(
      fmt::format("attempt to add duplicate property '{}' to object (type 'container')", id));
}

}  // namespace

std::vector<IothreadObject>::const_iterator Daemon::FindIothread(std::string_view id) const {
  return std::find_if(iothreads_.begin(), iothreads_.end(),
                      [&](const IothreadObject& iothread) { return iothread.id == id; });
}

bool Daemon::HasIothread(std::string_view id) const { return FindIothread(id) != iothreads_.end(); }

bool Daemon::HasObject(std::string_view id) const {
  return HasIothread(id) || block::HasObject(id);
}

absl::Status Daemon::AddIothread(IothreadObject iothread) {
  if (HasObject(iothread.id)) return DuplicateObject(iothread.id);
  iothreads_.push_back(std::move(iothread));
  return absl::OkStatus();
}

absl::Status Daemon::AddSecret(const std::string& id, std::string value) {
  if (HasObject(id)) return DuplicateObject(id);
  return block::AddSecret(id, std::move(value));
}

absl::Status Daemon::AddTlsCredentials(const std::string& id, block::TlsCredentials credentials) {
  if (HasObject(id)) return DuplicateObject(id);
  return block::AddTlsCredentials(id, std::move(credentials));
}

absl::Status Daemon::DeleteObject(std::string_view id) {
  auto it = FindIothread(id);
  if (it == iothreads_.end()) {
    if (!block::RemoveObject(id)) {
      return absl::NotFoundError(fmt::format("object '{}' not found", id));
    }
    return absl::OkStatus();
  }
  for (const LiveExport& live : exports_) {
    if (std::find(live.spec.iothreads.begin(), live.spec.iothreads.end(), id) !=
        live.spec.iothreads.end()) {
      return absl::FailedPreconditionError(fmt::format(
          "object '{}' can't be deleted: export '{}' runs in it", id, live.spec.options.id));
    }
  }
  iothreads_.erase(it);
  return absl::OkStatus();
}

absl::Status Daemon::ResizeNode(std::string_view node_name, int64_t size) {
  const block::BlockGraph::Entry* entry = graph_.Find(node_name);
  if (entry == nullptr) {
    return absl::NotFoundError(fmt::format("Cannot find device='' nor node-name='{}'", node_name));
  }
  if (size < 0) {
    return absl::InvalidArgumentError("Parameter 'size' expects a >0 size");
  }
  if (entry->node->read_only()) {
    return absl::FailedPreconditionError("Image is read-only");  // QEMU's words
  }
  if (absl::Status status = graph_.CheckResize(node_name); !status.ok()) return status;
  // Every driver's message names the node already.
  absl::Status status = entry->node->Resize(static_cast<uint64_t>(size));
  if (!status.ok()) return status;
  // The nodes above this one may have changed size with it, so every export refreshes (but those
  // being deleted, whose stop may hold what that takes).
  for (LiveExport& live : exports_) {
    if (!live.deleting()) live.running->DropCachedAttributes();
  }
  return absl::OkStatus();
}

json Daemon::NamedBlockNodes(bool flat) const { return NamedBlockNodesJson(graph_, flat); }

json Daemon::BlockExports() const {
  json exports = json::array();
  // Newest first, as QEMU lists them (it adds each export at the head of its list).
  for (auto it = exports_.rbegin(); it != exports_.rend(); ++it) {
    const LiveExport& live = *it;
    exports.push_back({{"type", live.running->type()},
                       {"id", live.spec.options.id},
                       {"node-name", live.spec.options.node_name},
                       {"shutting-down", live.deleting() || live.running->ending()}});
  }
  return exports;
}

absl::StatusOr<json> Daemon::ExportStats(const std::optional<std::string>& id) const {
  if (id && FindExport(*id) == nullptr) {
    return absl::NotFoundError(fmt::format("export '{}' not found", *id));
  }
  json result = json::array();
  for (const LiveExport& live : exports_) {
    if (id && live.spec.options.id != *id) continue;
    json queues = json::array();
    fuse::QueueStatsSnapshot total;
    for (const fuse::QueueStatsSnapshot& queue : live.running->Stats()) {
      queues.push_back(StatsJson(queue));
      Accumulate(queue, &total);
    }
    json entry = {{"id", live.spec.options.id},
                  {"type", live.running->type()},
                  {"node-name", live.spec.options.node_name},
                  {"total", StatsJson(total)},
                  {"queues", std::move(queues)}};
    // Passthrough I/O never reaches a queue: say so, or low counts would mislead.
    if (const auto passthrough = live.running->passthrough_stats(); passthrough.has_value()) {
      entry["passthrough"] = {{"active", passthrough->active},
                              {"open-files", passthrough->open_files},
                              {"opens", passthrough->opens}};
    }
    result.push_back(std::move(entry));
  }
  return result;
}

}  // namespace bexd::cli
