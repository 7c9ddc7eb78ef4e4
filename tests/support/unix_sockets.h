// SPDX-License-Identifier: GPL-2.0-or-later
// Unix socket files as tests set them up: a server of the test's own listening at a path, the
// socket file a killed server leaves, and what is at a path now.
#pragma once

#include <sys/types.h>
#include <sys/un.h>

#include <string>

#include "util/unique_fd.h"

namespace bexd::testing {

// The address of the unix socket at `path`.
sockaddr_un UnixAddress(const std::string& path);
// A stream socket bound to `path` and listening, as another process's server would be.
util::UniqueFd ListenOnPath(const std::string& path);
// Binds a socket to `path` and closes it: a socket file nobody listens on.
void LeaveStaleSocket(const std::string& path);
// Whether a stream connect to `path` succeeds.
bool SocketAnswers(const std::string& path);
// The inode `path` names (lstat), 0 if nothing is there.
ino_t InodeAt(const std::string& path);

}  // namespace bexd::testing
