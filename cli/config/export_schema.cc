// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/export_schema.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstring>

#include "cli/config/names.h"
#include "cli/config/paths.h"
#include "export/fuse_dev/fuse_export.h"
#include "export/queue/queue_cpus.h"
#include "export/vhost_user/vhost_user_fs_export.h"

namespace bexd::cli {
namespace {

using exports::AllowOther;
using exports::IoUringMode;
using exports::PassthroughMode;

// The virtio-fs configuration space holds the tag in 36 bytes.
constexpr size_t kMaxTagLength = 36;
// A spin longer than a second is a mistake, not a latency trade.
constexpr uint64_t kMaxPollNs = 1000000000;

void CheckMountpoint(OptionReader& reader, const std::string& mountpoint) {
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) {
    // A FUSE mount left by a killed bexd answers ENOTCONN; starting the export clears it.
    if (errno == ENOTCONN) return;
    // QEMU's words, which scripts and iotest 308 match.
    reader.Fail(absl::InvalidArgumentError(
        fmt::format("Failed to stat '{}': {}", mountpoint, std::strerror(errno))));
  } else if (!S_ISREG(st.st_mode)) {
    reader.Fail(absl::InvalidArgumentError(fmt::format("'{}' is not a regular file", mountpoint)));
  }
}

// queue-cpus: a CPU list such as "0-3,8" (in keyval, commas are doubled: queue-cpus=0-3,,8).
void ReadQueueCpus(OptionReader& reader, std::vector<int>* cpus) {
  std::string text;
  reader.String("queue-cpus", &text);
  if (!reader.ok() || !reader.Has("queue-cpus")) return;
  absl::StatusOr<std::vector<int>> parsed = exports::ParseCpuList(text);
  if (!parsed.ok()) {
    reader.Fail("queue-cpus", std::string(parsed.status().message()));
    return;
  }
  *cpus = std::move(*parsed);
}

// Fills `queues` from the iothread list when it names several threads; an explicit count must
// agree with it.
void ApplyIothreads(OptionReader& reader, const std::vector<std::string>& iothreads,
                    std::string_view queue_key, uint32_t* queues) {
  if (!reader.ok() || iothreads.size() < 2) return;
  if (!reader.Has(queue_key)) {
    *queues = static_cast<uint32_t>(iothreads.size());
  } else if (*queues != iothreads.size()) {
    reader.Fail(queue_key, fmt::format("{} conflicts with the {} threads named by iothread",
                                       *queues, iothreads.size()));
  }
}

exports::FuseExportOptions ReadFuseOptions(OptionReader& reader,
                                           const std::vector<std::string>& iothreads) {
  exports::FuseExportOptions fuse;
  reader.RequiredString("mountpoint", &fuse.mountpoint);
  if (reader.ok()) {
    fuse.mountpoint = AbsolutePath(fuse.mountpoint);
    CheckMountpoint(reader, fuse.mountpoint);
  }
  reader.Bool("growable", &fuse.growable);
  reader.Enum("allow-other", &fuse.allow_other,
              {{"off", AllowOther::kOff}, {"on", AllowOther::kOn}, {"auto", AllowOther::kAuto}});
  reader.Enum("passthrough", &fuse.passthrough,
              {{"off", PassthroughMode::kOff},
               {"on", PassthroughMode::kOn},
               {"auto", PassthroughMode::kAuto}});
  reader.Integer("num-queues", &fuse.num_queues, 1, exports::FuseExport::kMaxQueues);
  ApplyIothreads(reader, iothreads, "num-queues", &fuse.num_queues);
  ReadQueueCpus(reader, &fuse.queue_cpus);
  reader.Enum("io-uring", &fuse.io_uring,
              {{"off", IoUringMode::kOff}, {"on", IoUringMode::kOn}, {"auto", IoUringMode::kAuto}});
  reader.Integer("io-uring-queue-depth", &fuse.io_uring_queue_depth, 1,
                 exports::FuseRingTransport::kMaxDepth);
  return fuse;
}

exports::VhostUserFsExportOptions ReadVhostUserFsOptions(
    OptionReader& reader, const std::string& node_name, const std::vector<std::string>& iothreads) {
  exports::VhostUserFsExportOptions vhost;
  OptionReader& addr = reader.Child("addr");
  if (reader.ok() && !reader.Has("addr")) reader.Fail("addr", "missing (required)");
  std::string type;
  addr.RequiredString("type", &type);
  if (addr.ok() && type != "unix") {
    addr.Fail("type", fmt::format("'{}' is not supported (bexd listens on unix only)", type));
  }
  addr.RequiredString("path", &vhost.socket_path);
  if (addr.ok()) {
    vhost.socket_path = AbsolutePath(vhost.socket_path);
    if (vhost.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
      addr.Fail("path", fmt::format("'{}' is longer than {} bytes, the limit for a unix socket",
                                    vhost.socket_path, sizeof(sockaddr_un::sun_path) - 1));
    }
  }
  // Optional, and only labels logs: the tag the guest mounts by is QEMU's vhost-user-fs-pci
  // tag= property (bexd offers no config space, VHOST_USER_PROTOCOL_F_CONFIG).
  reader.String("tag", &vhost.tag);
  if (reader.ok() && vhost.tag.size() > kMaxTagLength) {
    reader.Fail("tag", fmt::format("longer than {} bytes", kMaxTagLength));
  }
  vhost.file_name = node_name;
  reader.String("file-name", &vhost.file_name);
  if (reader.ok() &&
      (vhost.file_name.empty() || vhost.file_name == "." || vhost.file_name == ".." ||
       vhost.file_name.size() > NAME_MAX || vhost.file_name.find('/') != std::string::npos ||
       vhost.file_name.find('\0') != std::string::npos)) {
    reader.Fail("file-name", fmt::format("{} is not a valid file name (one path component)",
                                         OptionReader::Quote(vhost.file_name)));
  }
  reader.Bool("growable", &vhost.growable);
  reader.Integer("num-request-queues", &vhost.num_request_queues, 1,
                 exports::VhostUserFsExport::kMaxRequestQueues);
  ApplyIothreads(reader, iothreads, "num-request-queues", &vhost.num_request_queues);
  reader.Integer("poll-max-ns", &vhost.poll_max_ns, 0, kMaxPollNs);
  ReadQueueCpus(reader, &vhost.queue_cpus);
  return vhost;
}

}  // namespace

absl::StatusOr<ExportSpec> ParseExportOptions(const nlohmann::json& object, Syntax syntax,
                                              const std::string& path) {
  OptionReader reader(object, syntax, path);
  ExportSpec spec;
  exports::ExportOptions& options = spec.options;
  std::string type;
  reader.RequiredString("type", &type);
  if (reader.ok() && !reader.Has("id")) reader.RequiredString("id", &options.id);
  reader.String("id", &options.id);
  // QEMU's words, which scripts match (what a valid id is: usage.md).
  if (reader.ok() && !CheckName(options.id).ok()) {
    reader.Fail(absl::InvalidArgumentError("Invalid block export id"));
  }
  reader.RequiredString("node-name", &options.node_name);
  reader.Bool("writable", &options.writable);
  reader.Bool("writethrough", &options.writethrough);
  reader.StringList("iothread", &spec.iothreads);
  // bexd never moves a node between threads, so a fixed iothread always holds.
  bool fixed_iothread = false;
  reader.Bool("fixed-iothread", &fixed_iothread);

  if (type == "fuse") {
    options.transport = ReadFuseOptions(reader, spec.iothreads);
  } else if (type == "vhost-user-fs") {
    options.transport = ReadVhostUserFsOptions(reader, options.node_name, spec.iothreads);
  } else if (reader.ok()) {
    reader.Fail("type", fmt::format("'{}' is not supported by bexd (supported: {})", type,
                                    fmt::join(kExportTypes, ", ")));
  }
  absl::Status status = reader.Finish();
  if (!status.ok()) return status;
  return spec;
}

}  // namespace bexd::cli
