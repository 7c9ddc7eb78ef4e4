// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/backing_name.h"

#include <fmt/format.h>

namespace bexd::block::qcow2 {

absl::StatusOr<std::string> ResolveBackingFileName(std::string_view image_filename,
                                                   std::string_view backing_name) {
  if (backing_name.empty()) return absl::InvalidArgumentError("the backing file name is empty");
  constexpr std::string_view kFilePrefix = "file:";
  if (backing_name.substr(0, kFilePrefix.size()) == kFilePrefix) {
    backing_name.remove_prefix(kFilePrefix.size());
  }
  // QEMU's test for a protocol prefix: a colon before any slash.
  size_t colon = backing_name.find(':');
  if (colon != std::string_view::npos &&
      backing_name.substr(0, colon).find('/') == std::string_view::npos) {
    return absl::UnimplementedError(
        fmt::format("backing file '{}' is not a local file name; give the backing node explicitly",
                    backing_name));
  }
  if (backing_name.front() == '/') return std::string(backing_name);
  size_t slash = image_filename.rfind('/');
  if (slash == std::string_view::npos) return std::string(backing_name);
  return fmt::format("{}{}", image_filename.substr(0, slash + 1), backing_name);
}

}  // namespace bexd::block::qcow2
