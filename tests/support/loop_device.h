// SPDX-License-Identifier: GPL-2.0-or-later
// A loop device over a file, set up with losetup for one test and detached afterwards (needs root
// and the loop driver). Buffered, not direct I/O: the file's own cache and errors show through.
#pragma once

#include <cstdint>
#include <string>

namespace bexd::testing {

class LoopDevice {
 public:
  // Attaches `backing` to a free loop device; path() is empty if that failed (no root, no loop
  // support, no losetup), for the test to skip.
  explicit LoopDevice(const std::string& backing);
  // Only `size` bytes of `backing` from `offset` (losetup --offset --sizelimit), read-only if
  // asked.
  struct Window {
    uint64_t offset = 0;
    uint64_t size = 0;
    bool read_only = false;
  };
  LoopDevice(const std::string& backing, const Window& window);
  ~LoopDevice();
  LoopDevice(const LoopDevice&) = delete;
  LoopDevice& operator=(const LoopDevice&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace bexd::testing
