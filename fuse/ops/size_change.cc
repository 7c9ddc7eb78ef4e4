// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuse/ops/size_change.h"

#include "fuse/op_table.h"
#include "fuse/status_errno.h"

namespace bexd::fuse::ops {

int ChangeSize(Call& call, uint64_t size, SizeChange how, log::RateLimit& limit) {
  Session& session = call.session();
  const absl::Status status =
      how == SizeChange::kGrow ? session.GrowTo(size) : session.Resize(size);
  if (status.ok()) return 0;
  log::Limited(limit, log::Level::kWarn, "FUSE {}: resizing node '{}' to {} bytes failed: {}",
               OpcodeName{call.state().opcode}, session.node().node_name(), size,
               status.ToString());
  return ErrnoOf(status);
}

}  // namespace bexd::fuse::ops
