// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/image_state.h"

#include <cstring>

#include "util/log.h"

namespace bexd::block::qcow2 {

void ImageState::NoteFlushFailed(int error) {
  int none = 0;
  if (!flush_failed.compare_exchange_strong(none, error, std::memory_order_acq_rel)) return;
  // Writing metadata back after such a failure is how an image gets corrupt: a table written
  // later may point at clusters whose refcounts the disk dropped (QEMU's file-posix keeps failing
  // flushes after a failed fdatasync for the same reason).
  log::Error(
      "node '{}': flushing its image failed ({}); the disk may have dropped what was written since "
      "the last good flush, so no metadata is written back and every flush fails from now on, "
      "until the node is reopened (check the image with qemu-img check first)",
      node_name, std::strerror(error));
}

}  // namespace bexd::block::qcow2
