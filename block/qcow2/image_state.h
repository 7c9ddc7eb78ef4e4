// SPDX-License-Identifier: GPL-2.0-or-later
// What the node, its queues and its metadata engine share about one open qcow2 image. Fields that
// queue threads read are immutable after open or atomic; the rest belongs to the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "block/block_node.h"
#include "block/options.h"
#include "block/qcow2/format.h"
#include "block/qcow2/grace.h"
#include "block/qcow2/table_cache.h"

namespace bexd::block::qcow2 {

class Engine;

struct ImageState {
  std::string node_name;
  Geometry geometry;
  uint32_t version = 3;
  uint8_t compression_type = kCompressionZlib;
  bool read_only = true;
  DiscardMode discard = DiscardMode::kIgnore;
  // Whether freed clusters are discarded in the file child: those a discard or unmapping
  // write-zeroes frees (pass-discard-request), those freed otherwise (pass-discard-other).
  bool pass_discard_request = false;
  bool pass_discard_other = false;
  std::shared_ptr<BlockNode> file;
  std::shared_ptr<BlockNode> backing;  // may be null
  std::unique_ptr<TableCache> tables;
  GraceDomain grace;
  std::atomic<uint64_t> size{0};  // the virtual size
  // A damaged structure was found: writes fail with -EIO from now on.
  std::atomic<bool> corrupt{false};
  // The errno of the first failed flush (or FUA write) of the file child, 0 if none: the disk may
  // have dropped what was written since the last good flush, and which of it cannot be known. No
  // metadata is written from then on (it could refer to what was lost) and every flush fails,
  // until the node is reopened. NoteFlushFailed() sets it.
  std::atomic<int> flush_failed{0};
  // No metadata change is waiting to be written: a FUA write into an allocated cluster needs only
  // FUA on the file, and a flush only the file's flush. Cleared before a change becomes visible.
  std::atomic<bool> metadata_clean{true};
  Engine* engine = nullptr;
  // Queues the node handed out (not the engine's own); Close() needs them gone.
  std::atomic<uint32_t> user_queues{0};

  void NoteFlushFailed(int error);
};

}  // namespace bexd::block::qcow2
