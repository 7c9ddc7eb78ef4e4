// Driver options as parsed from --blockdev / blockdev-add (QEMU's names and defaults).
#pragma once

#include <cstdint>
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

struct BlockdevOptions {
  std::string node_name;
  bool read_only = false;
  std::variant<NullOptions, FileOptions> driver;
};

}  // namespace bexd::block
