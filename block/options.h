// SPDX-License-Identifier: GPL-2.0-or-later
// Driver options as parsed from --blockdev / blockdev-add (QEMU's names and defaults).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "block/objects.h"

namespace bexd::block {

struct NullOptions {
  uint64_t size = uint64_t{1} << 30;
  bool read_zeroes = false;
  uint64_t latency_ns = 0;
  bool operator==(const NullOptions&) const = default;
};

enum class AioMode { kNative, kThreads, kIoUring };

// QEMU's name for the mode (aio=...).
const char* AioModeName(AioMode aio);
enum class DiscardMode { kIgnore, kUnmap };
// QEMU's detect-zeroes: a write whose data is all zeroes becomes a write-zeroes request (on), one
// that may also free the range (unmap; QEMU allows it only with discard=unmap).
enum class DetectZeroes { kOff, kOn, kUnmap };

// QEMU's name for the mode (detect-zeroes=..., query-named-block-nodes' detect_zeroes).
const char* DetectZeroesName(DetectZeroes mode);
enum class LockingMode { kAuto, kOn, kOff };

struct FileOptions {
  std::string filename;
  // driver=host_device (QEMU's name for block devices): the file must be one. driver=file takes
  // regular files and block devices both.
  bool host_device = false;
  AioMode aio = AioMode::kNative;
  bool cache_direct = false;
  bool cache_no_flush = false;
  DiscardMode discard = DiscardMode::kIgnore;
  LockingMode locking = LockingMode::kAuto;
  // QEMU's force-share (from the node's options): a read-only image locked without refusing
  // anything to other processes, so that it can be read while another process writes it.
  bool force_share = false;
  // QEMU's aio-max-batch: with aio=native, at most this many requests go to the kernel in one
  // io_submit (0: every request waiting at the end of a Poll(), and every contiguous run).
  uint32_t aio_max_batch = 0;
  bool operator==(const FileOptions&) const = default;
};

// QEMU's raw format: the child's bytes from `offset`, `size` of them (default: to its end).
struct RawOptions {
  uint64_t offset = 0;
  std::optional<uint64_t> size;
  // ignore: discard requests complete without reaching the child; unmap: passed on.
  DiscardMode discard = DiscardMode::kIgnore;
  bool operator==(const RawOptions&) const = default;
};

// A host and port (QEMU's InetSocketAddressBase; the port may be a service name).
struct InetAddress {
  std::string host;
  std::string port;
  bool operator==(const InetAddress&) const = default;
};

enum class RbdAuthMode { kCephx, kNone };

// QEMU's rbd driver (BlockdevOptionsRbd): an image, or a snapshot of one, in a Ceph cluster.
struct RbdOptions {
  std::string pool;
  std::string name_space;  // QEMU's `namespace`; empty: the pool's default namespace
  std::string image;
  std::optional<std::string> snapshot;    // a snapshot opens read-only
  std::optional<std::string> conf;        // unset: Ceph's default files, if any
  std::optional<std::string> user;        // the cephx id without "client."; unset: Ceph's default
  std::optional<std::string> key_secret;  // id of a `secret` object holding the cephx key
  std::vector<RbdAuthMode> auth_client_required;  // empty: as the configuration says
  std::vector<InetAddress> server;                // monitors; empty: as the configuration says
  bool cache_no_flush = false;
  DiscardMode discard = DiscardMode::kIgnore;
  bool operator==(const RbdOptions&) const = default;
};

// QEMU's nbd driver: a client of an NBD server (block/nbd/). `server` is QEMU's SocketAddress
// (inet: host and port; unix: path).
struct NbdOptions {
  enum class Transport { kInet, kUnix };
  Transport transport = Transport::kInet;
  std::string host;         // inet
  std::string port;         // inet: a number or a service name, as QEMU takes it
  std::string path;         // unix: the socket
  std::string export_name;  // `export`; empty: the server's default export
  // ignore: discards complete without reaching the server and write-zeroes keep the range
  // allocated (NBD_CMD_FLAG_NO_HOLE); unmap: trims and unmapping zero writes are sent.
  DiscardMode discard = DiscardMode::kIgnore;
  // Seconds that requests wait for a lost connection to come back before they fail with EIO.
  uint32_t reconnect_delay = 0;
  // Seconds that opening the node keeps trying to connect (0: one attempt), as QEMU's.
  uint32_t open_timeout = 0;
  std::string tls_creds;     // id of a TLS credentials object; empty: no TLS
  std::string tls_hostname;  // the name the server's certificate must carry (QEMU's)
  // The credentials tls_creds names, looked up when the node opens: the node keeps them for its
  // later connections, so deleting the object changes no open node (QEMU keeps a reference).
  std::optional<TlsCredentials> tls;
  bool operator==(const NbdOptions&) const = default;
};

struct BlockdevOptions;

// How options name a child node (QEMU's BlockdevRef / BlockdevRefOrNull).
struct ChildRef {
  enum class Kind {
    kReference,  // an existing node, by node name
    kInline,     // a node defined right here, owned by its parent
    kNull,       // backing only: explicitly no backing node
  };
  Kind kind = Kind::kReference;
  std::string node_name;                           // kReference
  std::shared_ptr<const BlockdevOptions> options;  // kInline

  bool operator==(const ChildRef& other) const;
};

// The qcow2 driver's options, with QEMU's names and defaults (block/qcow2/ implements the driver;
// its `file` and `backing` children are BlockdevOptions::file and ::backing).
struct Qcow2Options {
  // lazy-refcounts: defer refcount updates and keep the image marked dirty meanwhile. Unset: the
  // image's lazy refcounts compatible feature bit decides (QEMU's default).
  std::optional<bool> lazy_refcounts;
  // cache-size, l2-cache-size, refcount-cache-size in bytes. Unset: an L2 cache that maps the
  // whole image, up to 32 MiB (a 256 GiB image with 64 KiB clusters), and a 4-cluster refcount
  // cache, as QEMU.
  std::optional<uint64_t> cache_size;
  std::optional<uint64_t> l2_cache_size;
  std::optional<uint64_t> refcount_cache_size;
  // cache-clean-interval: seconds after which cache entries nobody used are dropped (0: never).
  uint64_t cache_clean_interval = 600;
  // l2-cache-entry-size: checked as QEMU does (a power of two from 512 to the cluster size); the
  // cache always holds whole L2 tables.
  std::optional<uint64_t> l2_cache_entry_size;
  // pass-discard-request: clusters a discard or an unmapping write-zeroes frees are discarded in
  // the file child too (unset: with discard=unmap). pass-discard-other: so are clusters freed
  // otherwise (an overwritten compressed or shared cluster). pass-discard-snapshot is accepted;
  // bexd deletes no snapshots.
  std::optional<bool> pass_discard_request;
  bool pass_discard_other = false;
  // The node's discard option: with kUnmap, discard requests free clusters and pass the freed
  // ranges on to the file child; with kIgnore they do nothing.
  DiscardMode discard = DiscardMode::kIgnore;
  bool operator==(const Qcow2Options&) const = default;
};

struct BlockdevOptions {
  // Required at the top; an inline child without one gets an automatic name ("#block123").
  std::string node_name;
  bool read_only = false;
  // QEMU's auto-read-only: a node not asked to be read-only opens read-only when its image cannot
  // be opened for writing (read-only file system, no permission).
  bool auto_read_only = false;
  // QEMU's force-share: the node refuses no permission to other users, in the graph and (file)
  // in the image locks; only with read_only.
  bool force_share = false;
  // Applies to writes submitted to this node's queues, whatever the driver (block_node.cc).
  DetectZeroes detect_zeroes = DetectZeroes::kOff;
  std::variant<NullOptions, FileOptions, RawOptions, Qcow2Options, RbdOptions, NbdOptions> driver;
  std::optional<ChildRef> file;     // format drivers' protocol child
  std::optional<ChildRef> backing;  // qcow2; unset: the one the image header names
  bool operator==(const BlockdevOptions&) const = default;
};

inline bool ChildRef::operator==(const ChildRef& other) const {
  if (kind != other.kind || node_name != other.node_name) return false;
  if (options == nullptr || other.options == nullptr) return options == other.options;
  return *options == *other.options;
}

}  // namespace bexd::block
