// SPDX-License-Identifier: GPL-2.0-or-later
// Takes finished libaio events without a system call. An io_context_t is the address of the
// context's completion ring, which the kernel maps into the process: a header (struct aio_ring in
// fs/aio.c) followed by the io_event array. The kernel writes an event, then advances `tail`;
// the owner reads events from `head` to `tail` and advances `head`, which frees those slots. When
// the header does not carry the layout this code knows, Take() calls io_getevents instead.
#pragma once

#include <libaio.h>

#include <cstdint>

namespace bexd::block {

class AioEventRing {
 public:
  // `context` from io_setup; the ring reads its header once, here.
  explicit AioEventRing(io_context_t context);

  // Copies up to `capacity` finished events into `events` without waiting; returns how many, or a
  // negative errno from io_getevents. Only one thread may take events from a context, and only
  // through this (io_getevents elsewhere would race with the head updates).
  int Take(struct io_event* events, int capacity);

  // Whether Take() reads the ring itself (false: it calls io_getevents).
  bool in_user_space() const { return ring_ != nullptr; }

  // The header of the kernel's ring, as fs/aio.c lays it out.
  struct Header {
    uint32_t id;
    uint32_t nr;    // io_event slots in the ring
    uint32_t head;  // written by the reader
    uint32_t tail;  // written by the kernel
    uint32_t magic;
    uint32_t compat_features;
    uint32_t incompat_features;
    uint32_t header_length;  // sizeof(Header)
  };
  static constexpr uint32_t kMagic = 0xa10a10a1;
  static constexpr uint32_t kIncompatFeatures = 0;  // what a reader must understand

 private:
  io_context_t context_;
  Header* ring_ = nullptr;  // null: the layout is not the one above
  struct io_event* slots_ = nullptr;
  uint32_t nr_ = 0;
};

}  // namespace bexd::block
