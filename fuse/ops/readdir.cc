// SPDX-License-Identifier: GPL-2.0-or-later
// OPENDIR, READDIR, READDIRPLUS and RELEASEDIR of the virtio-fs root directory: ".", ".." and the
// one file.
#include <dirent.h>
#include <linux/fuse.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "fuse/ops/attributes.h"
#include "fuse/ops/ops.h"

namespace bexd::fuse::ops {
namespace {

constexpr uint64_t kDirectoryHandle = 2;
constexpr size_t kMaxNameBytes = 255;

size_t AlignedRecord(size_t bytes) { return (bytes + 7) & ~size_t{7}; }

Answer ListEntries(Call& call, bool plus) {
  const auto in = call.args().Read<struct fuse_read_in>();
  const Session& session = call.session();
  struct Entry {
    std::string_view name;
    NodeKind kind;
  };
  const Entry entries[] = {{".", NodeKind::kDirectory},
                           {"..", NodeKind::kDirectory},
                           {session.options().file_name, NodeKind::kFile}};
  constexpr size_t kEntryCount = sizeof(entries) / sizeof(entries[0]);

  // Whole records only, as many as the kernel's buffer (and ours) holds.
  const size_t limit = std::min<size_t>(in.size, call.reply().remaining());
  unsigned char
      buffer[kEntryCount * (sizeof(struct fuse_direntplus) + AlignedRecord(kMaxNameBytes))];
  size_t used = 0;
  for (uint64_t index = in.offset; index < kEntryCount; ++index) {
    const Entry& entry = entries[index];
    const size_t head = plus ? sizeof(struct fuse_direntplus) : sizeof(struct fuse_dirent);
    const size_t record = AlignedRecord(head + entry.name.size());
    if (used + record > limit) break;
    unsigned char* at = buffer + used;
    std::memset(at, 0, record);
    struct fuse_dirent* dirent = reinterpret_cast<struct fuse_dirent*>(at);
    if (plus) {
      auto* direntplus = reinterpret_cast<struct fuse_direntplus*>(at);
      // "." and ".." carry node id 0: the kernel links no entry for them.
      if (entry.kind == NodeKind::kFile) {
        direntplus->entry_out.nodeid = session.file_node_id();
        direntplus->entry_out.entry_valid = kAttributeValidSeconds;
        direntplus->entry_out.attr_valid = kAttributeValidSeconds;
        direntplus->entry_out.attr = AttrOf(session, NodeKind::kFile);
      }
      dirent = &direntplus->dirent;
    }
    dirent->ino = entry.kind == NodeKind::kFile ? session.file_node_id() : kRootNodeId;
    dirent->off = index + 1;
    dirent->namelen = static_cast<uint32_t>(entry.name.size());
    dirent->type = entry.kind == NodeKind::kFile ? DT_REG : DT_DIR;
    std::memcpy(dirent->name, entry.name.data(), entry.name.size());
    used += record;
  }
  return call.Reply(buffer, used);
}

}  // namespace

Answer Opendir(Call& call) {
  struct fuse_open_out out;
  std::memset(&out, 0, sizeof(out));
  out.fh = kDirectoryHandle;
  out.open_flags = FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR;  // the listing never changes
  return call.Reply(out);
}

Answer Readdir(Call& call) { return ListEntries(call, /*plus=*/false); }

Answer Readdirplus(Call& call) { return ListEntries(call, /*plus=*/true); }

Answer Releasedir(Call& call) { return Answer::Empty(); }

}  // namespace bexd::fuse::ops
