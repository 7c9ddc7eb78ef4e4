// SPDX-License-Identifier: GPL-2.0-or-later
// Whether a FUSE export may use passthrough (docs/fuse-export.md#passthrough), and registering
// its backing file through the connection's /dev/fuse descriptor.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "block/block_node.h"
#include "export/options.h"
#include "fuse/passthrough.h"
#include "util/unique_fd.h"

namespace bexd::exports {

// FUSE_DEV_IOC_BACKING_OPEN and _CLOSE on a descriptor of the export's FUSE connection.
class DeviceBackingFiles final : public fuse::BackingFiles {
 public:
  explicit DeviceBackingFiles(util::UniqueFd device) : device_(std::move(device)) {}
  absl::StatusOr<int32_t> Open(int fd) override;
  absl::Status Close(int32_t backing_id) override;
  // Closing the connection's last descriptor aborts it: this one goes with the queues'.
  void CloseDevice() { device_.Reset(); }

 private:
  util::UniqueFd device_;
};

// The export's passthrough state with the node's host file reopened for it, or nullptr with
// `why_not` saying why the export runs without (passthrough=off, or auto where it cannot work).
// passthrough=on where it cannot work fails with one line saying why. The kernel's part (INIT)
// is checked once the export is mounted (FuseExport::Start).
absl::StatusOr<std::unique_ptr<fuse::Passthrough>> PreparePassthrough(const ExportOptions& options,
                                                                      const block::BlockNode& node,
                                                                      std::string* why_not);

// The one line passthrough=on fails with (the caller names the export).
absl::Status PassthroughImpossible(const std::string& reason);

}  // namespace bexd::exports
