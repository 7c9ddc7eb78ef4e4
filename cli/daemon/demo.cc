// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/demo.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "util/unique_fd.h"

namespace bexd::cli {
namespace {

using nlohmann::json;

absl::Status DemoError(std::string_view what, const std::string& path) {
  return absl::InvalidArgumentError(
      fmt::format("demo: {} '{}': {}", what, path, std::strerror(errno)));
}

absl::StatusOr<std::string> DefaultDir() {
  if (const char* state = std::getenv("XDG_STATE_HOME"); state != nullptr && state[0] == '/') {
    return fmt::format("{}/bexd/demo", state);
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    return fmt::format("{}/.local/state/bexd/demo", home);
  }
  return absl::InvalidArgumentError("demo: neither XDG_STATE_HOME nor HOME is set; use --demo-dir");
}

// Writes the image under a temporary name and renames it into place, so an interrupted run
// never leaves a half-written image behind.
absl::Status CreateImage(const std::string& image) {
  std::string partial = image + ".partial";
  util::UniqueFd fd(::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return DemoError("cannot create", partial);
  absl::Status status;
  if (::ftruncate(fd.get(), kDemoImageBytes) != 0) status = DemoError("cannot size", partial);
  for (uint64_t mib = 0; status.ok() && mib < kDemoImageBytes >> 20; ++mib) {
    std::string label = mib == 0
                            ? fmt::format("{}: 64 MiB raw, served by bexd over FUSE\n", kDemoLabel)
                            : fmt::format("{}: MiB {}\n", kDemoLabel, mib);
    if (::pwrite(fd.get(), label.data(), label.size(), mib << 20) !=
        static_cast<ssize_t>(label.size())) {
      status = DemoError("cannot write", partial);
    }
  }
  if (status.ok() && ::fsync(fd.get()) != 0) status = DemoError("cannot sync", partial);
  fd.Reset();
  if (status.ok() && ::rename(partial.c_str(), image.c_str()) != 0) {
    status = DemoError("cannot rename into place", image);
  }
  if (!status.ok()) ::unlink(partial.c_str());
  return status;
}

absl::Status PrepareMountpoint(const std::string& mountpoint) {
  util::UniqueFd fd(::open(mountpoint.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  // A demo killed without unmounting left a dead FUSE mount on the file, which the export
  // detaches when it starts (docs/fuse-export.md#restarting-after-a-crash).
  if (!fd && errno == ENOTCONN) return absl::OkStatus();
  if (!fd) return DemoError("cannot create the mountpoint", mountpoint);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DemoPaths> SetUpDemo(const std::string& dir, CommandLine* command_line) {
  DemoPaths paths;
  if (dir.empty()) {
    absl::StatusOr<std::string> default_dir = DefaultDir();
    if (!default_dir.ok()) return default_dir.status();
    paths.dir = *default_dir;
  } else {
    paths.dir = dir;
  }
  paths.image = paths.dir + "/disk.img";
  paths.mountpoint = paths.dir + "/disk";
  paths.monitor = paths.dir + "/qmp.sock";
  paths.pidfile = paths.dir + "/bexd.pid";

  std::error_code error;
  std::filesystem::create_directories(paths.dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        fmt::format("demo: cannot create '{}': {}", paths.dir, error.message()));
  }
  if (::access(paths.image.c_str(), F_OK) != 0) {
    absl::Status status = CreateImage(paths.image);
    if (!status.ok()) return status;
  }
  absl::Status status = PrepareMountpoint(paths.mountpoint);
  if (!status.ok()) return status;

  DaemonConfig& config = command_line->config;
  status =
      config.AddBlockdev({{"driver", "file"}, {"node-name", "demo"}, {"filename", paths.image}},
                         Syntax::kJson, "demo blockdev");
  if (status.ok()) {
    status = config.AddExport({{"type", "fuse"},
                               {"id", "demo"},
                               {"node-name", "demo"},
                               {"mountpoint", paths.mountpoint},
                               {"writable", true}},
                              Syntax::kJson, "demo export");
  }
  if (status.ok() && config.monitors.empty()) {
    status = config.AddMonitor({{"path", paths.monitor}}, Syntax::kJson, "demo monitor");
  } else if (!config.monitors.empty()) {
    paths.monitor = config.monitors.front().path;
  }
  if (!status.ok()) return status;
  if (command_line->pidfile.empty()) {
    command_line->pidfile = paths.pidfile;
  } else {
    paths.pidfile = command_line->pidfile;
  }
  return paths;
}

std::string DemoInstructions(const DemoPaths& paths) {
  return fmt::format(
      R"(bexd demo is running (pid {pid}).
  image      {image} (64 MiB raw; every MiB starts with "{label}")
  export     {mountpoint} (FUSE, writable; node "demo", export "demo")
  QMP        {monitor}
Try, from another shell:
  qemu-img info -f raw {mountpoint}
  head -c 64 {mountpoint}
  dd if=/dev/urandom of={mountpoint} bs=4k count=16 seek=256 conv=notrunc,fsync
  cmp -n 65536 -i 1048576 {mountpoint} {image} && echo "the image has the data"
  losetup --find --show {mountpoint}      # a block device on top (root)
  echo '{{"execute":"qmp_capabilities"}} {{"execute":"x-query-export-stats"}}' |
      socat - UNIX-CONNECT:{monitor}
Stop it with: kill $(cat {pidfile})   (or Ctrl-C if it runs in the foreground)
)",
      fmt::arg("pid", ::getpid()), fmt::arg("image", paths.image), fmt::arg("label", kDemoLabel),
      fmt::arg("mountpoint", paths.mountpoint), fmt::arg("monitor", paths.monitor),
      fmt::arg("pidfile", paths.pidfile));
}

}  // namespace bexd::cli
