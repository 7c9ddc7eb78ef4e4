// SPDX-License-Identifier: GPL-2.0-or-later
#pragma once

#include <string_view>

namespace bexd::cli {

// Sends `state` ("READY=1", "STOPPING=1") to the service manager over $NOTIFY_SOCKET, as
// systemd's Type=notify expects; does nothing when the variable is not set.
void NotifyServiceManager(std::string_view state);

}  // namespace bexd::cli
