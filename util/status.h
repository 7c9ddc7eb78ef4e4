// SPDX-License-Identifier: GPL-2.0-or-later
// Control-path Status helpers shared by every layer: an errno turned into a Status whose message
// says what failed, and a Status given the name of the thing it concerns.
#pragma once

#include <absl/status/status.h>
#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace bexd::util {

// "WHAT: strerror(error)", with the code absl maps `error` to (ENOENT: kNotFound, EACCES:
// kPermissionDenied, ENOMEM and EMFILE: kResourceExhausted, ...). `what` is a fmt format string.
// Pass errno as the first argument before anything else can change it.
template <typename... Args>
absl::Status ErrnoStatus(int error, fmt::format_string<Args...> what, Args&&... args) {
  return absl::ErrnoToStatus(error, fmt::format(what, std::forward<Args>(args)...));
}

// The same status with "PREFIX: " before its message ("export 'vfs0': ..."); OK stays OK.
absl::Status AnnotateStatus(std::string_view prefix, const absl::Status& status);

}  // namespace bexd::util
