// The virtio-fs root directory: LOOKUP, OPENDIR, READDIR, READDIRPLUS, RELEASEDIR. It holds
// ".", ".." and the one file.
#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "fuse/queue.h"

namespace bexd::fuse {
namespace {

constexpr uint64_t kDirectoryHandle = 2;
constexpr uint64_t kEntryValidSeconds = 1;
constexpr size_t kMaxNameBytes = 255;

size_t AlignedRecord(size_t bytes) { return (bytes + 7) & ~size_t{7}; }

}  // namespace

void Queue::HandleLookup(Request* request, const Header& header) {
  if (!RequireKind(request, header, NodeKind::kDirectory)) return;
  // The argument is the name and its terminating NUL.
  char name[kMaxNameBytes + 1];
  if (header.arg_bytes == 0) {
    ReplyError(request, EINVAL);
    return;
  }
  if (header.arg_bytes > sizeof(name)) {
    ReplyError(request, ENAMETOOLONG);
    return;
  }
  CopyFromIn(request, sizeof(struct fuse_in_header), name, header.arg_bytes);
  const std::string_view looked_up(name, header.arg_bytes - 1);
  if (name[header.arg_bytes - 1] != '\0' || looked_up.find('\0') != std::string_view::npos) {
    ReplyError(request, EINVAL);
    return;
  }
  if (looked_up != session_->options().file_name) {
    ReplyError(request, ENOENT);
    return;
  }
  struct fuse_entry_out out;
  std::memset(&out, 0, sizeof(out));
  out.nodeid = session_->file_node_id();
  out.entry_valid = kEntryValidSeconds;
  out.attr_valid = kEntryValidSeconds;
  out.attr = AttrOf(NodeKind::kFile);
  Reply(request, out);
}

void Queue::HandleOpendir(Request* request, const Header& header) {
  struct fuse_open_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kDirectory)) return;
  struct fuse_open_out out;
  std::memset(&out, 0, sizeof(out));
  out.fh = kDirectoryHandle;
  out.open_flags = FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR;  // the listing never changes
  Reply(request, out);
}

void Queue::HandleReleasedir(Request* request, const Header& header) {
  struct fuse_release_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kDirectory)) return;
  Reply(request, nullptr, 0);
}

void Queue::HandleReaddir(Request* request, const Header& header, bool plus) {
  struct fuse_read_in in;
  if (!ReadArgs(request, header, &in)) return;
  if (!RequireKind(request, header, NodeKind::kDirectory)) return;

  struct Entry {
    std::string_view name;
    NodeKind kind;
  };
  const Entry entries[] = {{".", NodeKind::kDirectory},
                           {"..", NodeKind::kDirectory},
                           {session_->options().file_name, NodeKind::kFile}};
  constexpr size_t kEntryCount = sizeof(entries) / sizeof(entries[0]);

  // Whole records only, as many as the kernel's buffer (and ours) holds.
  const size_t out_room = request->state.out_bytes > sizeof(struct fuse_out_header)
                              ? request->state.out_bytes - sizeof(struct fuse_out_header)
                              : 0;
  const size_t limit = std::min<size_t>(in.size, out_room);
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
        direntplus->entry_out.nodeid = session_->file_node_id();
        direntplus->entry_out.entry_valid = kEntryValidSeconds;
        direntplus->entry_out.attr_valid = kEntryValidSeconds;
        direntplus->entry_out.attr = AttrOf(NodeKind::kFile);
      }
      dirent = &direntplus->dirent;
    }
    dirent->ino = entry.kind == NodeKind::kFile ? session_->file_node_id() : kRootNodeId;
    dirent->off = index + 1;
    dirent->namelen = static_cast<uint32_t>(entry.name.size());
    dirent->type = entry.kind == NodeKind::kFile ? DT_REG : DT_DIR;
    std::memcpy(dirent->name, entry.name.data(), entry.name.size());
    used += record;
  }
  Reply(request, buffer, used);
}

}  // namespace bexd::fuse
