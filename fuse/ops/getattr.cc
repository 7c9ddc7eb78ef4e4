// SPDX-License-Identifier: GPL-2.0-or-later
// GETATTR.
#include <linux/fuse.h>

#include <cstring>

#include "fuse/ops/attributes.h"
#include "fuse/ops/ops.h"

namespace bexd::fuse::ops {

Answer Getattr(Call& call) {
  struct fuse_attr_out out;
  std::memset(&out, 0, sizeof(out));
  out.attr_valid = kAttributeValidSeconds;
  out.attr = AttrOf(call.session(), call.node_kind());
  return call.Reply(out);
}

}  // namespace bexd::fuse::ops
