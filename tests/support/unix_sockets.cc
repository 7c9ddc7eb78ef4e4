// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/unix_sockets.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace bexd::testing {
namespace {

util::UniqueFd Bind(const std::string& path) {
  util::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address = UnixAddress(path);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0)
      << path << ": " << std::strerror(errno);
  return fd;
}

}  // namespace

sockaddr_un UnixAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  EXPECT_LT(path.size(), sizeof(address.sun_path)) << path;
  std::memcpy(address.sun_path, path.data(), std::min(path.size(), sizeof(address.sun_path) - 1));
  return address;
}

util::UniqueFd ListenOnPath(const std::string& path) {
  util::UniqueFd fd = Bind(path);
  EXPECT_EQ(::listen(fd.get(), 4), 0) << path << ": " << std::strerror(errno);
  return fd;
}

void LeaveStaleSocket(const std::string& path) { Bind(path); }

bool SocketAnswers(const std::string& path) {
  util::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address = UnixAddress(path);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
}

ino_t InodeAt(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

}  // namespace bexd::testing
