// SPDX-License-Identifier: GPL-2.0-or-later
// The librados and librbd functions the rbd driver calls, loaded when the first rbd node opens
// (block/shared_library.h). Every call goes through Rbd(): `Rbd().rbd_open(...)`.
#pragma once

#include <absl/status/status.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

#include "block/shared_library.h"

namespace bexd::block {

// clang-format off
#define BEXD_LIBRADOS_FUNCTIONS(X) \
  X(rados_create) \
  X(rados_conf_read_file) \
  X(rados_conf_set) \
  X(rados_conf_get) \
  X(rados_connect) \
  X(rados_shutdown) \
  X(rados_ioctx_create) \
  X(rados_ioctx_destroy) \
  X(rados_ioctx_set_namespace)
// clang-format on

// clang-format off
#define BEXD_LIBRBD_FUNCTIONS(X) \
  X(rbd_open) \
  X(rbd_open_read_only) \
  X(rbd_close) \
  X(rbd_get_size) \
  X(rbd_get_features) \
  X(rbd_resize) \
  X(rbd_namespace_exists) \
  X(rbd_lock_acquire) \
  X(rbd_lock_get_owners) \
  X(rbd_lock_get_owners_cleanup) \
  X(rbd_watchers_list) \
  X(rbd_watchers_list_cleanup) \
  X(rbd_update_watch) \
  X(rbd_update_unwatch) \
  X(rbd_aio_create_completion) \
  X(rbd_aio_get_return_value) \
  X(rbd_aio_release) \
  X(rbd_aio_readv) \
  X(rbd_aio_writev) \
  X(rbd_aio_flush) \
  X(rbd_aio_discard) \
  X(rbd_aio_write_zeroes)
// clang-format on

struct RbdApi {
  BEXD_LIBRADOS_FUNCTIONS(BEXD_FUNCTION_POINTER)
  BEXD_LIBRBD_FUNCTIONS(BEXD_FUNCTION_POINTER)
};

// Loads both libraries once; every later call returns the first call's result. Thread-safe.
absl::Status LoadRbdApi();

// Only after LoadRbdApi() succeeded.
const RbdApi& Rbd();

}  // namespace bexd::block
