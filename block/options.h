// Driver options as parsed from --blockdev / blockdev-add (QEMU's names and defaults).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

namespace bexd::block {

struct NullOptions {
  uint64_t size = uint64_t{1} << 30;
  bool read_zeroes = false;
  uint64_t latency_ns = 0;
};

enum class AioMode { kNative, kThreads };
enum class DiscardMode { kIgnore, kUnmap };
enum class LockingMode { kAuto, kOn, kOff };

struct FileOptions {
  std::string filename;
  AioMode aio = AioMode::kNative;
  bool cache_direct = false;
  bool cache_no_flush = false;
  DiscardMode discard = DiscardMode::kIgnore;
  LockingMode locking = LockingMode::kAuto;
};

// The qcow2 driver's options, with QEMU's names and defaults. Its `file` and `backing` children are
// opened by the caller and handed to OpenQcow2Node (block/open.h).
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
  // The node's discard option: with kUnmap, discard requests free clusters and pass the freed
  // ranges on to the file child; with kIgnore they do nothing.
  DiscardMode discard = DiscardMode::kIgnore;
};

struct BlockdevOptions {
  std::string node_name;
  bool read_only = false;
  std::variant<NullOptions, FileOptions> driver;
};

}  // namespace bexd::block
