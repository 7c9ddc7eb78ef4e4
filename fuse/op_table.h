// SPDX-License-Identifier: GPL-2.0-or-later
// The dispatch table, as libfuse's fuse_ll_ops[]: for each opcode its handler, its name and what
// Queue::Dispatch checks before the handler runs, so that handlers start from a request whose
// session, arguments, reply room and node are known to be right.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <string_view>

#include "fuse/answer.h"
#include "fuse/queue_stats.h"

namespace bexd::fuse {

class Call;
using Handler = Answer (*)(Call& call);

// The node an opcode acts on.
enum class Target : uint8_t {
  kNoNode,     // the node id is not looked at (INIT, FORGET, refusals)
  kAnyNode,    // an existing node, else ENOENT
  kFile,       // the file: ENOENT for no node, EISDIR for the directory
  kDirectory,  // the directory: ENOENT for no node, ENOTDIR for the file
};

struct Operation {
  const char* name = nullptr;  // "READ": what logs call the opcode
  Handler handler = nullptr;
  bool needs_init = true;  // EIO before INIT and after DESTROY
  bool replies = true;     // false: no reply at all, not even to an error (FORGET, INTERRUPT, ...)
  // Shorter arguments are EINVAL. Longer ones are accepted: newer kernels extend structs.
  uint32_t min_arg_bytes = 0;
  // The payload of a fixed-size reply. Room for it is checked before the handler runs, so that a
  // request with no room for its answer changes nothing. 0 for replies without a payload and for
  // variable ones (READ, READDIR), whose handlers check.
  uint32_t reply_bytes = 0;
  Target target = Target::kNoNode;
  // The QueueStats counter the opcode counts in besides `requests`, if any.
  std::atomic<uint64_t> QueueStats::*counter = nullptr;
};

// The entry for `opcode`, or nullptr if the table does not know it.
const Operation* FindOperation(uint32_t opcode);
// What opcodes the table does not know get: ENOSYS once INIT has happened (the kernel remembers
// it and stops asking).
extern const Operation kUnknownOperation;

// Formats as the opcode's name ("WRITE"), or "opcode 4096" when the table does not know it.
struct OpcodeName {
  uint32_t opcode;
};

}  // namespace bexd::fuse

template <>
struct fmt::formatter<bexd::fuse::OpcodeName> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(bexd::fuse::OpcodeName name, Context& context) const {
    if (const bexd::fuse::Operation* operation = bexd::fuse::FindOperation(name.opcode)) {
      return fmt::formatter<std::string_view>::format(operation->name, context);
    }
    return fmt::format_to(context.out(), "opcode {}", name.opcode);
  }
};
