// SPDX-License-Identifier: GPL-2.0-or-later
// The daemon's live state: open block nodes and running exports, by name. Start-up and the QMP
// commands both go through it, so they apply the same checks. Main thread only; only the export
// ended callback runs elsewhere.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "block/block_node.h"
#include "block/graph.h"
#include "block/objects.h"
#include "block/options.h"
#include "cli/config/control_schema.h"
#include "cli/config/export_schema.h"
#include "export/export.h"

namespace bexd::cli {

enum class ExportDeleteMode {
  kSafe,  // refuse while a client has the export open
  kHard,  // complete what is in flight, then remove it regardless
};

class Daemon {
 public:
  // `iothreads`: the --object iothreads exports may name.
  explicit Daemon(std::vector<IothreadObject> iothreads);
  ~Daemon();  // stops every export
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Opens the node and the children its options define inline (the block graph).
  absl::Status AddBlockdev(const block::BlockdevOptions& options);
  // QEMU's blockdev-del: refused while an export serves the node or another node uses it.
  absl::Status DeleteBlockdev(std::string_view node_name);

  // object-add/object-del, with one namespace of ids for every type as QEMU's /objects. An
  // iothread is a name exports may give as iothread=; deleting one that a running export names is
  // refused (QEMU would let it go). Secrets and TLS credentials go to the process's table
  // (block/objects.h), which drivers read when a node opens, so deleting one changes no open node.
  absl::Status AddIothread(IothreadObject iothread);
  absl::Status AddSecret(const std::string& id, std::string value);
  absl::Status AddTlsCredentials(const std::string& id, block::TlsCredentials credentials);
  absl::Status DeleteObject(std::string_view id);
  const std::vector<IothreadObject>& iothreads() const { return iothreads_; }

  // block_resize: truncates or grows the node to `size` bytes.
  absl::Status ResizeNode(std::string_view node_name, int64_t size);

  // Records the socket path of a QMP monitor, so no export or other monitor may use it. Refuses
  // a path that an export or another monitor uses already.
  absl::Status AddMonitorPath(const std::string& path);

  // Checks `specs` against the live nodes, exports and monitors and against each other, without
  // starting anything: unique ids and mountpoints/sockets, existing nodes and iothreads, writable
  // only on a writable node.
  absl::Status CheckNewExports(std::span<const ExportSpec> specs) const;
  absl::Status AddExport(const ExportSpec& spec);
  // Starts removing the export, as QEMU's block-export-del: it stops on a thread of its own
  // (draining and flushing may wait for slow storage), and RemoveEndedExports() forgets and
  // announces it once that is done. Until then it is listed as shutting down and keeps its id,
  // mountpoint and node.
  absl::Status DeleteExport(std::string_view id, ExportDeleteMode mode);
  // Forgets every export that ended on its own or whose deletion has stopped it, announcing each
  // (BLOCK_EXPORT_DELETED).
  void RemoveEndedExports();
  // Stops every export (drain, flush, unmount), all at once, then forgets them newest first, each
  // passed to `announce` if set (QSD's BLOCK_EXPORT_DELETED at quit and on signals, sent at once).
  void StopAllExports(const std::function<void(const std::string&)>& announce);
  // The exports whose flush failed when they stopped (deleted, ended or stopped at shutdown):
  // data written through them may not be durable, which the exit status reports.
  const std::vector<std::string>& stop_flush_failures() const { return stop_flush_failures_; }

  // QMP's query-named-block-nodes, query-block-exports and x-query-export-stats results.
  nlohmann::json NamedBlockNodes(bool flat) const;
  nlohmann::json BlockExports() const;
  absl::StatusOr<nlohmann::json> ExportStats(const std::optional<std::string>& id) const;

  // Called with the id of each export that DeleteExport or RemoveEndedExports removed (for
  // BLOCK_EXPORT_DELETED).
  void set_export_deleted_callback(std::function<void(const std::string&)> callback) {
    export_deleted_ = std::move(callback);
  }
  // Called on an export's own thread when it ends on its own (exports::Export::EndedFn), and on a
  // deletion's thread when it has stopped the export; it must get RemoveEndedExports() run on the
  // main thread. Set it before adding exports.
  void set_export_ended_callback(exports::Export::EndedFn callback) {
    export_ended_ = std::move(callback);
  }

 private:
  // Whether an object (of any type) has that id.
  bool HasObject(std::string_view id) const;
  bool HasIothread(std::string_view id) const;
  std::vector<IothreadObject>::const_iterator FindIothread(std::string_view id) const;
  struct LiveExport {
    ExportSpec spec;
    // Endpoint(spec), taken before the export started: canonicalizing stats the path, and the
    // main thread must never stat a mountpoint whose export may not answer (one shutting down).
    std::string endpoint;
    std::unique_ptr<exports::Export> running;
    // Deletion: the thread that stops the export, and whether it is done.
    std::thread stopper;
    std::shared_ptr<std::atomic<bool>> stopped;
    bool deleting() const { return stopped != nullptr; }
  };

  const LiveExport* FindExport(std::string_view id) const;
  absl::Status CheckNewExport(const ExportSpec& spec, std::span<const ExportSpec> also_new) const;
  // Stops an export and forgets it, releasing its node; the export after it.
  std::vector<LiveExport>::iterator RemoveExport(std::vector<LiveExport>::iterator it);

  std::vector<IothreadObject> iothreads_;
  block::BlockGraph graph_;
  std::vector<LiveExport> exports_;
  std::vector<std::string> monitor_paths_;  // canonical
  std::function<void(const std::string&)> export_deleted_;
  exports::Export::EndedFn export_ended_;
  std::vector<std::string> stop_flush_failures_;
};

}  // namespace bexd::cli
