// SPDX-License-Identifier: GPL-2.0-or-later
#include "util/read_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "util/status.h"
#include "util/unique_fd.h"

namespace bexd::util {

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, uint64_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus(errno, "cannot read '{}'", path);
  std::string contents;
  char buffer[65536];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoStatus(errno, "cannot read '{}'", path);
    if (got == 0) return contents;
    if (contents.size() + static_cast<uint64_t>(got) > max_bytes) {
      return absl::InvalidArgumentError(
          fmt::format("'{}' is longer than {} bytes", path, max_bytes));
    }
    contents.append(buffer, static_cast<size_t>(got));
  }
}

}  // namespace bexd::util
