// SPDX-License-Identifier: GPL-2.0-or-later
// Backing files for the core tests over the real file driver: a sparse image in a disk-backed
// temporary directory (O_DIRECT does not work on tmpfs), read and written directly so that tests
// compare what the core did with what landed in the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "block/options.h"

namespace bexd::fuse::testing {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed);

class ImageFile {
 public:
  explicit ImageFile(uint64_t size);
  ~ImageFile();
  ImageFile(const ImageFile&) = delete;
  ImageFile& operator=(const ImageFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const;
  // Bytes of storage the file holds (st_blocks), not its length.
  uint64_t allocated() const;
  std::vector<uint8_t> Read(uint64_t offset, size_t n) const;
  void Write(uint64_t offset, const std::vector<uint8_t>& bytes) const;

 private:
  std::string dir_;
  std::string path_;
};

// A memfd of `size` bytes sealed against growing and shrinking, at a path a file node can open
// (/proc/self/fd/N): the kernel refuses every size change of it with EPERM, whatever the
// filesystem under the tests.
class SealedFile {
 public:
  explicit SealedFile(uint64_t size);
  ~SealedFile();
  SealedFile(const SealedFile&) = delete;
  SealedFile& operator=(const SealedFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// A file node ("file0") on `path`, with discard=unmap so that punched holes free storage.
block::BlockdevOptions FileNode(const std::string& path, bool direct = false,
                                bool read_only = false);

}  // namespace bexd::fuse::testing
