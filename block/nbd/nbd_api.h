// SPDX-License-Identifier: GPL-2.0-or-later
// The libnbd functions the nbd driver calls, loaded when the first nbd node opens
// (block/shared_library.h). Every call goes through Nbd(): `Nbd().nbd_create()`.
#pragma once

#include <absl/status/status.h>
#include <libnbd.h>

#include "block/shared_library.h"

namespace bexd::block {

// clang-format off
#define BEXD_LIBNBD_FUNCTIONS(X) \
  X(nbd_create) \
  X(nbd_close) \
  X(nbd_get_error) \
  X(nbd_get_errno) \
  X(nbd_set_export_name) \
  X(nbd_set_pread_initialize) \
  X(nbd_add_meta_context) \
  X(nbd_set_tls) \
  X(nbd_set_tls_certificates) \
  X(nbd_set_tls_verify_peer) \
  X(nbd_set_tls_psk_file) \
  X(nbd_set_tls_username) \
  X(nbd_aio_connect_tcp) \
  X(nbd_aio_connect_unix) \
  X(nbd_aio_disconnect) \
  X(nbd_aio_in_flight) \
  X(nbd_aio_get_fd) \
  X(nbd_aio_get_direction) \
  X(nbd_aio_notify_read) \
  X(nbd_aio_notify_write) \
  X(nbd_aio_is_ready) \
  X(nbd_aio_is_processing) \
  X(nbd_aio_is_closed) \
  X(nbd_aio_is_dead) \
  X(nbd_get_size) \
  X(nbd_get_block_size) \
  X(nbd_is_read_only) \
  X(nbd_can_flush) \
  X(nbd_can_fua) \
  X(nbd_can_trim) \
  X(nbd_can_zero) \
  X(nbd_can_multi_conn) \
  X(nbd_can_meta_context) \
  X(nbd_aio_pread) \
  X(nbd_aio_pwrite) \
  X(nbd_aio_flush) \
  X(nbd_aio_trim) \
  X(nbd_aio_zero) \
  X(nbd_aio_block_status)
// clang-format on

struct NbdApi {
  BEXD_LIBNBD_FUNCTIONS(BEXD_FUNCTION_POINTER)
};

// Loads libnbd once; every later call returns the first call's result. Thread-safe.
absl::Status LoadNbdApi();

// Only after LoadNbdApi() succeeded.
const NbdApi& Nbd();

}  // namespace bexd::block
