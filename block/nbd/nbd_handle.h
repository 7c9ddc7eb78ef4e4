// SPDX-License-Identifier: GPL-2.0-or-later
// One libnbd connection to the server the options name: connecting (asynchronously, so that an
// attempt can be bounded in time and cancelled), and what the server offered on it.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <libnbd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "block/options.h"

namespace bexd::block {

// Tells the server (NBD_CMD_DISC, without waiting) and closes. Closing drops the commands still in
// the handle: libnbd never runs their completion callbacks nor touches their buffers afterwards.
struct NbdHandleCloser {
  void operator()(nbd_handle* handle) const;
};
using NbdHandle = std::unique_ptr<nbd_handle, NbdHandleCloser>;

// What the server offered in the handshake of one connection.
struct NbdServerInfo {
  uint64_t size = 0;
  bool read_only = false;
  bool can_flush = false;
  bool can_fua = false;
  bool can_trim = false;
  bool can_zero = false;
  bool can_multi_conn = false;
  bool block_status = false;  // base:allocation was negotiated
  uint32_t min_block = 0;     // 0: not advertised
  uint32_t max_payload = 0;   // 0: not advertised
};

NbdServerInfo ReadServerInfo(nbd_handle* handle);

// Whether the connection is gone: dead (an error) or closed (by either side).
bool NbdHandleEnded(nbd_handle* handle);

// How bexd names the server in messages: "host:port" or "unix:path".
std::string NbdAddress(const NbdOptions& options);
// QEMU's pseudo-filename of the export (query-named-block-nodes' "file"):
// nbd://host:port[/export] or nbd+unix://[/export]?socket=path.
std::string NbdFilename(const NbdOptions& options);

// A connection attempt that has not finished its handshake by then is given up.
inline constexpr std::chrono::seconds kNbdConnectTimeout{10};

// Connects to the server and negotiates the export (structured replies, base:allocation).
// Blocks the calling thread for at most `timeout`; `cancel_fd` (or -1) becoming readable ends the
// attempt with Cancelled. Errors say what failed, without the node's name.
absl::StatusOr<NbdHandle> ConnectNbd(const NbdOptions& options, int cancel_fd,
                                     std::chrono::milliseconds timeout);

// The NBD protocol caps a server's minimum block size at 64 KiB.
inline constexpr uint32_t kNbdMaxMinBlock = 64 * 1024;

// Whether the server's minimum block size is one bexd can work with, as QEMU checks it: a power
// of two within the protocol's cap that divides the export's size (requests are rounded out to
// whole blocks, so a partial last block could not be read).
absl::Status CheckBlockSizes(const NbdServerInfo& info);

// Whether a connection made after the node was opened may serve it: the same size, writable if
// the node is, and multi-conn if the node runs one connection per queue.
absl::Status CheckSameExport(const NbdServerInfo& opened, const NbdServerInfo& now, bool writable,
                             bool multi_conn);

}  // namespace bexd::block
