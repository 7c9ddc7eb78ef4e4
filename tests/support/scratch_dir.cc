// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/scratch_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace bexd::testing {
namespace {

std::string ScratchBase() {
  struct statfs fs;
  if (::statfs("/var/tmp", &fs) == 0 && fs.f_type != TMPFS_MAGIC) return "/var/tmp";
  return std::filesystem::current_path().string();
}

}  // namespace

ScratchDir::ScratchDir(const std::string& prefix) {
  std::string pattern = ScratchBase() + "/bexd-" + prefix + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << pattern << ": " << std::strerror(errno);
    return;
  }
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string ScratchDir::CreateFile(const std::string& name, uint64_t size) const {
  const std::string path = path_ + "/" + name;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  if (fd >= 0) {
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0) << path << ": " << std::strerror(errno);
    ::close(fd);
  }
  return path;
}

}  // namespace bexd::testing
