// SPDX-License-Identifier: GPL-2.0-or-later
// QEMU's `secret` objects (--object secret,id=ID,file=PATH): named secrets that other options
// refer to by id, such as rbd's key-secret, so that no key appears on a command line. One table
// for the process: the daemon adds the secrets of its command line and config file before it
// opens any node, and drivers look them up when they open one. Control path only; thread-safe.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <string>
#include <string_view>

namespace bexd::block {

// `value` is the secret's bytes (already decoded from base64 if it was given so).
absl::Status AddSecret(const std::string& id, std::string value);
// QEMU's error for an unknown id: "No secret with id 'ID'".
absl::StatusOr<std::string> LookupSecret(std::string_view id);
void RemoveSecret(std::string_view id);

}  // namespace bexd::block
