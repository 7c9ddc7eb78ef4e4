// SPDX-License-Identifier: GPL-2.0-or-later
// A scratch directory for tests that need real files, shared by every test folder.
#pragma once

#include <cstdint>
#include <string>

namespace bexd::testing {

// A fresh directory removed with its contents on destruction. Placed under /var/tmp unless that
// is tmpfs (no O_DIRECT there before Linux 6.6), then under the working directory, so O_DIRECT
// tests run on a disk file system.
class ScratchDir {
 public:
  // `prefix` names the directory ("bexd-<prefix>-XXXXXX") so a leftover one shows its owner.
  explicit ScratchDir(const std::string& prefix = "test");
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  // Creates (or truncates) a sparse file of `size` bytes and returns its path.
  std::string CreateFile(const std::string& name, uint64_t size) const;

 private:
  std::string path_;
};

}  // namespace bexd::testing
