// SPDX-License-Identifier: GPL-2.0-or-later
// --pidfile: a file locked (flock) for the daemon's whole life, holding its pid once it serves.
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <string>

#include "util/unique_fd.h"

namespace bexd::cli {

class Pidfile {
 public:
  // Creates or opens `path` and locks it. Fails, naming the holder's pid, while another process
  // holds the lock; a file left by a process that is gone is taken over and emptied.
  static absl::StatusOr<std::unique_ptr<Pidfile>> Acquire(const std::string& path);
  ~Pidfile();  // removes the file, then drops the lock
  Pidfile(const Pidfile&) = delete;
  Pidfile& operator=(const Pidfile&) = delete;

  // Writes this process's pid to the file, which Acquire() emptied.
  absl::Status WritePid();

 private:
  Pidfile(std::string path, util::UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  std::string path_;
  util::UniqueFd fd_;  // holds the lock
};

}  // namespace bexd::cli
