// SPDX-License-Identifier: GPL-2.0-or-later
// LOOKUP in the virtio-fs root directory, which holds the one file.
#include <linux/fuse.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "fuse/ops/attributes.h"
#include "fuse/ops/ops.h"

namespace bexd::fuse::ops {
namespace {

constexpr size_t kMaxNameBytes = 255;

}  // namespace

Answer Lookup(Call& call) {
  // The argument is the name and its terminating NUL (the table checked it is not empty).
  char name[kMaxNameBytes + 1];
  const size_t arg_bytes = call.args().remaining();
  if (arg_bytes > sizeof(name)) return Answer::Error(ENAMETOOLONG);
  call.args().ReadBytes(name, arg_bytes);
  const std::string_view looked_up(name, arg_bytes - 1);
  if (name[arg_bytes - 1] != '\0' || looked_up.find('\0') != std::string_view::npos) {
    return Answer::Error(EINVAL);
  }
  const Session& session = call.session();
  if (looked_up != session.options().file_name) return Answer::Error(ENOENT);
  struct fuse_entry_out out;
  std::memset(&out, 0, sizeof(out));
  out.nodeid = session.file_node_id();
  out.entry_valid = kAttributeValidSeconds;
  out.attr_valid = kAttributeValidSeconds;
  out.attr = AttrOf(session, NodeKind::kFile);
  return call.Reply(out);
}

}  // namespace bexd::fuse::ops
