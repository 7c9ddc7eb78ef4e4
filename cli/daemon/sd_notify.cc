// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/log.h"
#include "util/unique_fd.h"

namespace bexd::cli {

void NotifyServiceManager(std::string_view state) {
  const char* socket_path = std::getenv("NOTIFY_SOCKET");
  if (socket_path == nullptr || socket_path[0] == '\0') return;
  std::string path = socket_path;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path) || (path[0] != '/' && path[0] != '@')) {
    log::Warn("NOTIFY_SOCKET '{}' is not a usable unix socket address", path);
    return;
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  if (path[0] == '@') address.sun_path[0] = '\0';  // abstract namespace
  socklen_t length = offsetof(sockaddr_un, sun_path) + path.size();
  util::UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    log::Warn("sd_notify: socket: {}", std::strerror(errno));
    return;
  }
  if (::sendto(fd.get(), state.data(), state.size(), MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&address), length) < 0) {
    log::Warn("sd_notify to {}: {}", path, std::strerror(errno));
  }
}

}  // namespace bexd::cli
