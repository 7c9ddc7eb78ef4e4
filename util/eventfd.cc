// SPDX-License-Identifier: GPL-2.0-or-later
#include "util/eventfd.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "util/status.h"

namespace bexd::util {

absl::StatusOr<UniqueFd> CreateEventFd() {
  UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd) return ErrnoStatus(errno, "cannot create an eventfd");
  return fd;
}

void SignalEventFd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
}

void DrainEventFd(int fd) {
  uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(fd, &count, sizeof(count));
}

bool IsEventFd(int fd) {
  static constexpr std::string_view kLink = "anon_inode:[eventfd]";
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  char link[kLink.size() + 1];
  const ssize_t n = ::readlink(path.c_str(), link, sizeof(link));
  return n == static_cast<ssize_t>(kLink.size()) && std::string_view(link, n) == kLink;
}

}  // namespace bexd::util
