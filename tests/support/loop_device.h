// A loop device attached to a file for the lifetime of the object (needs root and the loop
// driver). Buffered, not direct I/O: the file's own cache and errors show through.
#pragma once

#include <string>

namespace bexd::testing {

class LoopDevice {
 public:
  explicit LoopDevice(const std::string& backing);
  // Detaches the device; if it is still open, the kernel detaches it at the last close.
  ~LoopDevice();
  LoopDevice(const LoopDevice&) = delete;
  LoopDevice& operator=(const LoopDevice&) = delete;

  // /dev/loopN, or "" if losetup failed.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace bexd::testing
