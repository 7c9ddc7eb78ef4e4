// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/fuse_dev/passthrough_setup.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <variant>

#include "fuse/fuse_abi_ext.h"

namespace bexd::exports {
namespace {

// The kernel registers backing files only for a server with CAP_SYS_ADMIN (fs/fuse/backing.c).
bool HasSysAdmin() {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective & CAP_TO_MASK(CAP_SYS_ADMIN);
}

// Why this export cannot hand its node's host file to the kernel, or "" if it can.
std::string Obstacle(const ExportOptions& options, const block::BlockNode& node,
                     const std::optional<block::HostFile>& host_file) {
  if (!host_file.has_value()) {
    return fmt::format(
        "node '{}' ({}) is not a host file exported whole; only a file or host_device node, or "
        "a raw node without offset or size over one, can be",
        node.node_name(), node.driver_name());
  }
  const auto& fuse_options = std::get<FuseExportOptions>(options.transport);
  if (options.writable && !fuse_options.growable && !host_file->block_device) {
    // The kernel would extend the image file where bexd answers ENOSPC. Passthrough cannot be
    // given to the read-only opens alone: the kernel fails any other open of the file while
    // one passthrough open lives (fs/fuse/iomode.c), so a later writer could not open it.
    return "a writable export of a regular file needs growable=on for passthrough (a passthrough "
           "write past the end would grow the image)";
  }
  if (options.writable && node.detect_zeroes() != block::DetectZeroes::kOff) {
    return fmt::format(
        "node '{}' has detect-zeroes={}, which bexd applies to each write, and passthrough "
        "writes never reach bexd",
        node.node_name(), block::DetectZeroesName(node.detect_zeroes()));
  }
  if (options.writethrough) {
    return "writethrough=on needs every write durable when answered, and passthrough writes are "
           "never answered by bexd";
  }
  if (!HasSysAdmin()) {
    return "bexd lacks CAP_SYS_ADMIN, which the kernel needs to register a backing file";
  }
  return "";
}

}  // namespace

absl::StatusOr<int32_t> DeviceBackingFiles::Open(int fd) {
  fuse::abi::BackingMap map = {.fd = fd, .flags = 0, .padding = 0};
  const int id = ioctl(device_.get(), fuse::abi::kDevIocBackingOpen, &map);
  if (id < 0) {
    // ErrnoToStatus appends the errno's text.
    return absl::ErrnoToStatus(
        errno, "the kernel refused to register the backing file (FUSE_DEV_IOC_BACKING_OPEN)");
  }
  if (id == 0) return absl::InternalError("the kernel registered the backing file as id 0");
  return id;
}

absl::Status DeviceBackingFiles::Close(int32_t backing_id) {
  uint32_t id = static_cast<uint32_t>(backing_id);
  if (ioctl(device_.get(), fuse::abi::kDevIocBackingClose, &id) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("closing backing id {} failed", backing_id));
  }
  return absl::OkStatus();
}

absl::Status PassthroughImpossible(const std::string& reason) {
  // StartExport() names the export.
  return absl::FailedPreconditionError(fmt::format("passthrough=on is not possible: {}", reason));
}

absl::StatusOr<std::unique_ptr<fuse::Passthrough>> PreparePassthrough(const ExportOptions& options,
                                                                      const block::BlockNode& node,
                                                                      std::string* why_not) {
  const auto& fuse_options = std::get<FuseExportOptions>(options.transport);
  if (fuse_options.passthrough == PassthroughMode::kOff) {
    *why_not = "passthrough=off";
    return nullptr;
  }
  const std::optional<block::HostFile> host_file = node.host_file();
  std::string obstacle = Obstacle(options, node, host_file);
  util::UniqueFd backing;
  if (obstacle.empty()) {
    // The node's descriptor may be writable (a read-only export of a writable node) and O_DIRECT;
    // the kernel opens its own file from this one's path with each client's flags, so only the
    // access mode matters here: a read-only export registers a read-only file.
    const std::string path = fmt::format("/proc/self/fd/{}", host_file->fd);
    backing.Reset(::open(path.c_str(), (options.writable ? O_RDWR : O_RDONLY) | O_CLOEXEC));
    if (!backing) {
      obstacle =
          fmt::format("cannot reopen the node's file for the kernel: {}", std::strerror(errno));
    }
  }
  if (!obstacle.empty()) {
    if (fuse_options.passthrough == PassthroughMode::kOn) {
      return PassthroughImpossible(obstacle);
    }
    *why_not = std::move(obstacle);
    return nullptr;
  }
  if (options.writable && fuse_options.passthrough == PassthroughMode::kAuto) {
    // The kernel cannot revoke a passthrough file: one still open when the export stops keeps
    // writing to the image, which another program may have taken over by then.
    *why_not =
        "auto leaves writable exports on the queues (a client's passthrough file stays usable "
        "after the export stops, and could write to an image someone else uses by then); "
        "passthrough=on accepts that";
    return nullptr;
  }
  return std::make_unique<fuse::Passthrough>(std::move(backing),
                                             fmt::format("export '{}'", options.id));
}

}  // namespace bexd::exports
