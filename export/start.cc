// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/start.h"

#include <fmt/format.h>

#include <type_traits>
#include <utility>
#include <variant>

#include "export/fuse_dev/fuse_export.h"
#include "export/queue/queue_cpus.h"
#include "export/vhost_user/vhost_user_fs_export.h"
#include "fuse/session.h"
#include "util/status.h"

namespace bexd::exports {
namespace {

// What the request core needs to know about the export, from the options every transport shares
// and from what its client is.
fuse::SessionOptions SessionOptionsFor(const ExportOptions& options, const block::BlockNode& node) {
  fuse::SessionOptions session_options;
  session_options.writable = options.writable;
  session_options.writethrough = options.writethrough;
  std::visit(
      [&](const auto& transport) {
        using Transport = std::decay_t<decltype(transport)>;
        session_options.growable = transport.growable;
        if constexpr (std::is_same_v<Transport, VhostUserFsExportOptions>) {
          // The client is a guest, not the host's user: size changes need growable.
          session_options.resize_needs_growable = true;
          session_options.directory_root = true;
          session_options.file_name =
              transport.file_name.empty() ? node.node_name() : transport.file_name;
        }
      },
      options.transport);
  return session_options;
}

absl::StatusOr<std::unique_ptr<Export>> StartTransport(const ExportOptions& options,
                                                       std::shared_ptr<block::BlockNode> node,
                                                       Export::EndedFn on_ended) {
  const std::vector<int>& queue_cpus = std::visit(
      [](const auto& transport) -> const std::vector<int>& { return transport.queue_cpus; },
      options.transport);
  if (absl::Status status = CheckQueueCpus(queue_cpus); !status.ok()) return status;
  absl::StatusOr<std::shared_ptr<fuse::Session>> session =
      fuse::Session::Create(node, SessionOptionsFor(options, *node));
  if (!session.ok()) return session.status();
  return std::visit(
      [&](const auto& transport) -> absl::StatusOr<std::unique_ptr<Export>> {
        using Transport = std::decay_t<decltype(transport)>;
        if constexpr (std::is_same_v<Transport, FuseExportOptions>) {
          absl::StatusOr<std::unique_ptr<FuseExport>> fuse_export =
              FuseExport::Start(options, std::move(node), std::move(*session), std::move(on_ended));
          if (!fuse_export.ok()) return fuse_export.status();
          return std::unique_ptr<Export>(std::move(*fuse_export));
        } else {
          absl::StatusOr<std::unique_ptr<VhostUserFsExport>> vhost_export =
              VhostUserFsExport::Start(options, std::move(node), std::move(*session));
          if (!vhost_export.ok()) return vhost_export.status();
          return std::unique_ptr<Export>(std::move(*vhost_export));
        }
      },
      options.transport);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Export>> StartExport(const ExportOptions& options,
                                                    std::shared_ptr<block::BlockNode> node,
                                                    Export::EndedFn on_ended) {
  if (options.id.empty()) return absl::InvalidArgumentError("an export needs an id");
  if (node == nullptr) {
    return absl::InvalidArgumentError(fmt::format("export '{}': no block node given", options.id));
  }
  absl::StatusOr<std::unique_ptr<Export>> started =
      StartTransport(options, std::move(node), std::move(on_ended));
  if (!started.ok())
    return util::AnnotateStatus(fmt::format("export '{}'", options.id), started.status());
  return started;
}

}  // namespace bexd::exports
