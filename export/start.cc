#include "export/start.h"

#include <fmt/format.h>

#include <type_traits>
#include <variant>

#include "export/fuse_export.h"
#include "export/vhost_user_fs_export.h"

namespace bexd::exp {

absl::StatusOr<std::unique_ptr<Export>> StartExport(const ExportOptions& options,
                                                    std::shared_ptr<block::BlockNode> node,
                                                    Export::EndedFn on_ended) {
  if (options.id.empty()) return absl::InvalidArgumentError("an export needs an id");
  if (node == nullptr) {
    return absl::InvalidArgumentError(fmt::format("export '{}': no block node given", options.id));
  }
  return std::visit(
      [&](const auto& transport) -> absl::StatusOr<std::unique_ptr<Export>> {
        using Transport = std::decay_t<decltype(transport)>;
        if constexpr (std::is_same_v<Transport, FuseExportOptions>) {
          absl::StatusOr<std::unique_ptr<FuseExport>> fuse_export =
              FuseExport::Start(options, std::move(node), std::move(on_ended));
          if (!fuse_export.ok()) return fuse_export.status();
          return std::unique_ptr<Export>(std::move(*fuse_export));
        } else {
          absl::StatusOr<std::unique_ptr<VhostUserFsExport>> vhost_export =
              VhostUserFsExport::Start(options, std::move(node));
          if (!vhost_export.ok()) return vhost_export.status();
          return std::unique_ptr<Export>(std::move(*vhost_export));
        }
      },
      options.transport);
}

}  // namespace bexd::exp
