// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuse/op_table.h"

#include <linux/fuse.h>

#include <array>
#include <utility>

#include "fuse/ops/ops.h"

namespace bexd::fuse {
namespace {

// Opcodes below this index the table; the kernel's go up to 52 (STATX), CUSE_INIT is 4096.
constexpr uint32_t kTableSize = 64;

// fuse_init_in before 7.36 (major, minor, max_readahead, flags); INIT takes that or the full one.
constexpr uint32_t kPreExtendedInitBytes = 16;

constexpr std::array<Operation, kTableSize> BuildTable() {
  std::array<Operation, kTableSize> table{};
  // Session: the only opcodes allowed before INIT, and the ones that take no reply.
  table[FUSE_INIT] = {.name = "INIT",
                      .handler = ops::Init,
                      .needs_init = false,
                      .min_arg_bytes = kPreExtendedInitBytes,
                      .reply_bytes = sizeof(fuse_init_out)};
  table[FUSE_DESTROY] = {.name = "DESTROY", .handler = ops::Destroy};
  table[FUSE_FORGET] = {.name = "FORGET",
                        .handler = ops::Forget,
                        .needs_init = false,
                        .replies = false,
                        .min_arg_bytes = sizeof(fuse_forget_in)};
  table[FUSE_BATCH_FORGET] = {.name = "BATCH_FORGET",
                              .handler = ops::BatchForget,
                              .needs_init = false,
                              .replies = false,
                              .min_arg_bytes = sizeof(fuse_batch_forget_in)};
  table[FUSE_INTERRUPT] = {.name = "INTERRUPT",
                           .handler = ops::Interrupt,
                           .needs_init = false,
                           .replies = false,
                           .min_arg_bytes = sizeof(fuse_interrupt_in)};
  table[FUSE_NOTIFY_REPLY] = {
      .name = "NOTIFY_REPLY", .handler = ops::NotifyReply, .needs_init = false, .replies = false};

  // Attributes.
  table[FUSE_GETATTR] = {.name = "GETATTR",
                         .handler = ops::Getattr,
                         .min_arg_bytes = sizeof(fuse_getattr_in),
                         .reply_bytes = sizeof(fuse_attr_out),
                         .target = Target::kAnyNode};
  table[FUSE_SETATTR] = {.name = "SETATTR",
                         .handler = ops::Setattr,
                         .min_arg_bytes = sizeof(fuse_setattr_in),
                         .reply_bytes = sizeof(fuse_attr_out),
                         .target = Target::kAnyNode};
  table[FUSE_STATFS] = {.name = "STATFS",
                        .handler = ops::Statfs,
                        .reply_bytes = sizeof(fuse_statfs_out),
                        .target = Target::kAnyNode};

  // The file.
  table[FUSE_OPEN] = {.name = "OPEN",
                      .handler = ops::Open,
                      .min_arg_bytes = sizeof(fuse_open_in),
                      .reply_bytes = sizeof(fuse_open_out),
                      .target = Target::kFile};
  table[FUSE_RELEASE] = {.name = "RELEASE",
                         .handler = ops::Release,
                         .min_arg_bytes = sizeof(fuse_release_in),
                         .target = Target::kFile};
  table[FUSE_READ] = {.name = "READ",
                      .handler = ops::Read,
                      .min_arg_bytes = sizeof(fuse_read_in),
                      .target = Target::kFile,
                      .counter = &QueueStats::read_requests};
  table[FUSE_WRITE] = {.name = "WRITE",
                       .handler = ops::Write,
                       .min_arg_bytes = sizeof(fuse_write_in),
                       .reply_bytes = sizeof(fuse_write_out),
                       .target = Target::kFile,
                       .counter = &QueueStats::write_requests};
  table[FUSE_FLUSH] = {.name = "FLUSH",
                       .handler = ops::Flush,
                       .min_arg_bytes = sizeof(fuse_flush_in),
                       .target = Target::kFile};
  table[FUSE_FSYNC] = {.name = "FSYNC",
                       .handler = ops::Fsync,
                       .min_arg_bytes = sizeof(fuse_fsync_in),
                       .target = Target::kFile};
  table[FUSE_FALLOCATE] = {.name = "FALLOCATE",
                           .handler = ops::Fallocate,
                           .min_arg_bytes = sizeof(fuse_fallocate_in),
                           .target = Target::kFile};
  table[FUSE_LSEEK] = {.name = "LSEEK",
                       .handler = ops::Lseek,
                       .min_arg_bytes = sizeof(fuse_lseek_in),
                       .reply_bytes = sizeof(fuse_lseek_out),
                       .target = Target::kFile};

  // The virtio-fs root directory. LOOKUP's argument is a name and its NUL.
  table[FUSE_LOOKUP] = {.name = "LOOKUP",
                        .handler = ops::Lookup,
                        .min_arg_bytes = 1,
                        .reply_bytes = sizeof(fuse_entry_out),
                        .target = Target::kDirectory};
  table[FUSE_OPENDIR] = {.name = "OPENDIR",
                         .handler = ops::Opendir,
                         .min_arg_bytes = sizeof(fuse_open_in),
                         .reply_bytes = sizeof(fuse_open_out),
                         .target = Target::kDirectory};
  table[FUSE_READDIR] = {.name = "READDIR",
                         .handler = ops::Readdir,
                         .min_arg_bytes = sizeof(fuse_read_in),
                         .target = Target::kDirectory};
  table[FUSE_READDIRPLUS] = {.name = "READDIRPLUS",
                             .handler = ops::Readdirplus,
                             .min_arg_bytes = sizeof(fuse_read_in),
                             .target = Target::kDirectory};
  table[FUSE_RELEASEDIR] = {.name = "RELEASEDIR",
                            .handler = ops::Releasedir,
                            .min_arg_bytes = sizeof(fuse_release_in),
                            .target = Target::kDirectory};

  // Refused: no symlinks, and the tree is fixed (one directory, one file).
  table[FUSE_READLINK] = {.name = "READLINK", .handler = ops::Readlink};
  for (auto [opcode, name] : {std::pair{FUSE_MKNOD, "MKNOD"},
                              {FUSE_MKDIR, "MKDIR"},
                              {FUSE_SYMLINK, "SYMLINK"},
                              {FUSE_UNLINK, "UNLINK"},
                              {FUSE_RMDIR, "RMDIR"},
                              {FUSE_RENAME, "RENAME"},
                              {FUSE_RENAME2, "RENAME2"},
                              {FUSE_LINK, "LINK"},
                              {FUSE_CREATE, "CREATE"},
                              {FUSE_TMPFILE, "TMPFILE"}}) {
    table[opcode] = {.name = name, .handler = ops::ChangeTree};
  }
  // Not implemented: ENOSYS, which the kernel remembers, falling back to its own implementation
  // where it has one. Named here so that logs say which.
  for (auto [opcode, name] : {std::pair{FUSE_ACCESS, "ACCESS"},
                              {FUSE_SETXATTR, "SETXATTR"},
                              {FUSE_GETXATTR, "GETXATTR"},
                              {FUSE_LISTXATTR, "LISTXATTR"},
                              {FUSE_REMOVEXATTR, "REMOVEXATTR"},
                              {FUSE_GETLK, "GETLK"},
                              {FUSE_SETLK, "SETLK"},
                              {FUSE_SETLKW, "SETLKW"},
                              {FUSE_BMAP, "BMAP"},
                              {FUSE_IOCTL, "IOCTL"},
                              {FUSE_POLL, "POLL"},
                              {FUSE_FSYNCDIR, "FSYNCDIR"},
                              {FUSE_COPY_FILE_RANGE, "COPY_FILE_RANGE"},
                              {FUSE_SETUPMAPPING, "SETUPMAPPING"},
                              {FUSE_REMOVEMAPPING, "REMOVEMAPPING"},
                              {FUSE_SYNCFS, "SYNCFS"}}) {
    table[opcode] = {.name = name, .handler = ops::Unsupported};
  }
  return table;
}

constexpr std::array<Operation, kTableSize> kOperations = BuildTable();

}  // namespace

const Operation kUnknownOperation = {.name = "unknown", .handler = ops::Unsupported};

const Operation* FindOperation(uint32_t opcode) {
  if (opcode >= kTableSize || kOperations[opcode].handler == nullptr) return nullptr;
  return &kOperations[opcode];
}

}  // namespace bexd::fuse
