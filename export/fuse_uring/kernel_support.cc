// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_uring/kernel_support.h"

#include <fmt/format.h>

#include <fstream>
#include <string>
#include <vector>

#include "export/queue/queue_cpus.h"

namespace bexd::exports {

FuseUringSupport ReadFuseUringSupport(const std::string& path) {
  std::ifstream file(path);
  std::string value;
  if (!(file >> value)) {
    return {.why_not = fmt::format("this kernel has no FUSE over io_uring (no {})", path),
            .remedy = "it needs Linux 6.14 or later built with CONFIG_FUSE_IO_URING"};
  }
  if (value != "Y") {
    return {.why_not = fmt::format("FUSE over io_uring is disabled: {} is {}", path, value),
            .remedy = fmt::format("enable it as root with 'echo Y > {}'", path)};
  }
  return {.enabled = true};
}

absl::StatusOr<uint32_t> PossibleCpuCount() {
  constexpr char kPath[] = "/sys/devices/system/cpu/possible";
  std::ifstream file(kPath);
  std::string text;
  if (!(file >> text)) return absl::UnavailableError(fmt::format("cannot read {}", kPath));
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList(text);
  if (!cpus.ok()) {
    return absl::InternalError(fmt::format("{}: {}", kPath, std::string(cpus.status().message())));
  }
  return static_cast<uint32_t>(cpus->size());
}

}  // namespace bexd::exports
