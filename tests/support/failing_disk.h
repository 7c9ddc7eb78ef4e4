// SPDX-License-Identifier: GPL-2.0-or-later
// Real failing storage for tests: an nbdkit memory disk behind nbdkit's error filter, served as a
// regular file by nbdfuse. While failing, every read and write of the disk fails with EIO, a real
// error from the kernel's read()/write() on the file. A LoopDevice on the file adds the block
// device's page cache, so that a writer without O_DIRECT sees the failure when writeback fails,
// in fdatasync or a RWF_DSYNC write (declare it after the disk, so that it goes first).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace bexd::testing {

class FailingDisk {
 public:
  // Mounts a `size`-byte disk on the file `directory`/nbd. ok() is false (with the reason in
  // why_not()) if nbdfuse, nbdkit or /dev/fuse is missing or the mount does not appear.
  FailingDisk(const std::string& directory, uint64_t size);
  // Unmounts. Close every descriptor on the disk (and detach loop devices) first.
  ~FailingDisk();
  FailingDisk(const FailingDisk&) = delete;
  FailingDisk& operator=(const FailingDisk&) = delete;

  bool ok() const { return pid_ > 0; }
  const std::string& why_not() const { return why_not_; }
  // The disk as a regular file.
  const std::string& path() const { return path_; }
  void SetFailing(bool failing) const;

 private:
  void Stop();

  std::string path_;
  std::string trigger_;
  std::string why_not_;
  pid_t pid_ = -1;
};

}  // namespace bexd::testing
