// SPDX-License-Identifier: GPL-2.0-or-later
#include "util/status.h"

#include <string>

namespace bexd::util {

absl::Status AnnotateStatus(std::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), fmt::format("{}: {}", prefix, std::string(status.message())));
}

}  // namespace bexd::util
