// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/fuse/image_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

namespace bexd::fuse::testing {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<uint8_t> bytes(n);
  for (auto& byte : bytes) byte = static_cast<uint8_t>(random());
  return bytes;
}

ImageFile::ImageFile(uint64_t size) {
  char dir[] = "/var/tmp/bexd-fuse-core-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    ADD_FAILURE() << "mkdtemp: " << strerror(errno);
    return;
  }
  dir_ = dir;
  path_ = dir_ + "/image.raw";
  int fd = open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  close(fd);
}

ImageFile::~ImageFile() {
  unlink(path_.c_str());
  rmdir(dir_.c_str());
}

uint64_t ImageFile::size() const {
  struct stat st {};
  EXPECT_EQ(stat(path_.c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_size);
}

uint64_t ImageFile::allocated() const {
  struct stat st {};
  EXPECT_EQ(stat(path_.c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

std::vector<uint8_t> ImageFile::Read(uint64_t offset, size_t n) const {
  std::vector<uint8_t> bytes(n);
  int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_EQ(pread(fd, bytes.data(), n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  close(fd);
  return bytes;
}

void ImageFile::Write(uint64_t offset, const std::vector<uint8_t>& bytes) const {
  int fd = open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  EXPECT_EQ(pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)),
            static_cast<ssize_t>(bytes.size()));
  close(fd);
}

SealedFile::SealedFile(uint64_t size) {
  fd_ = memfd_create("bexd-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) {
    ADD_FAILURE() << "memfd_create: " << strerror(errno);
    return;
  }
  EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0);
  EXPECT_EQ(fcntl(fd_, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL), 0)
      << strerror(errno);
  path_ = "/proc/self/fd/" + std::to_string(fd_);
}

SealedFile::~SealedFile() {
  if (fd_ >= 0) close(fd_);
}

block::BlockdevOptions FileNode(const std::string& path, bool direct, bool read_only) {
  block::BlockdevOptions options;
  options.node_name = "file0";
  options.read_only = read_only;
  block::FileOptions file;
  file.filename = path;
  file.cache_direct = direct;
  file.discard = block::DiscardMode::kUnmap;
  options.driver = file;
  return options;
}

}  // namespace bexd::fuse::testing
