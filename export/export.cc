// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/export.h"

#include <string>

#include "export/flush_node.h"
#include "util/log.h"

namespace bexd::exports {

void Export::FlushAfterLastReply() {
  if (!writable_) return;
  if (absl::Status status = FlushNode(*node_); !status.ok()) {
    log::Error("export '{}': flush on stop failed: {}", id_, std::string(status.message()));
    stop_flush_failed_.store(true, std::memory_order_release);
  }
}

}  // namespace bexd::exports
