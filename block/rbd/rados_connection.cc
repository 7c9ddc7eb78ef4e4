// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/rbd/rados_connection.h"

#include <absl/strings/escaping.h>
#include <fmt/format.h>
#include <rbd/librbd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "block/rbd/rbd_api.h"
#include "block/objects.h"

namespace bexd::block {
namespace {

absl::Status Failed(int error, const std::string& node_name, const std::string& what) {
  return absl::ErrnoToStatus(error, fmt::format("node '{}': {}", node_name, what));
}

// QEMU's qemu_rbd_mon_host: "host:port" joined by ';', IPv6 hosts in brackets.
std::string MonHost(const std::vector<InetAddress>& servers) {
  std::string hosts;
  for (const InetAddress& server : servers) {
    if (!hosts.empty()) hosts += ';';
    if (server.host.find(':') != std::string::npos) {
      hosts += fmt::format("[{}]:{}", server.host, server.port);
    } else {
      hosts += fmt::format("{}:{}", server.host, server.port);
    }
  }
  return hosts;
}

std::string AuthModes(const std::vector<RbdAuthMode>& modes) {
  std::string text;
  for (RbdAuthMode mode : modes) {
    if (!text.empty()) text += ';';
    text += mode == RbdAuthMode::kCephx ? "cephx" : "none";
  }
  return text;
}

// A key as `ceph auth get-key` prints it, given as the secret's bytes (format=raw): the usual
// mistake, since librados wants the key's bytes and QEMU encodes the secret as base64 itself.
bool LooksLikeBase64Key(const std::string& secret) {
  std::string decoded;
  return secret.size() == 40 && secret.starts_with("AQ") &&
         absl::Base64Unescape(secret, &decoded) && decoded.size() == 28;
}

// Seconds in a time option, as rados_conf_get prints it; -1 if unreadable.
double ConfSeconds(rados_t cluster, const char* option) {
  char value[64];
  if (Rbd().rados_conf_get(cluster, option, value, sizeof(value)) != 0) return -1;
  char* end = nullptr;
  double seconds = std::strtod(value, &end);
  return end == value ? -1 : seconds;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RadosConnection>> RadosConnection::Connect(
    const std::string& node_name, const RbdOptions& options) {
  std::string key;
  bool key_looks_encoded = false;
  if (options.key_secret) {
    absl::StatusOr<std::string> secret = LookupSecret(*options.key_secret);
    if (!secret.ok()) {
      return absl::InvalidArgumentError(fmt::format("node '{}': key-secret: {}", node_name,
                                                    std::string(secret.status().message())));
    }
    key_looks_encoded = LooksLikeBase64Key(*secret);
    key = absl::Base64Escape(*secret);
  }

  std::unique_ptr<RadosConnection> connection(new RadosConnection());
  int r = Rbd().rados_create(&connection->cluster_, options.user ? options.user->c_str() : nullptr);
  if (r < 0) {
    connection->cluster_ = nullptr;
    return Failed(-r, node_name, "cannot create a Ceph client");
  }
  rados_t cluster = connection->cluster_;
  // As QEMU: without conf, Ceph's default files if there are any.
  r = Rbd().rados_conf_read_file(cluster, options.conf ? options.conf->c_str() : nullptr);
  if (r < 0 && options.conf) {
    return Failed(-r, node_name,
                  fmt::format("cannot read the Ceph configuration '{}'", *options.conf));
  }
  auto set = [&](const char* option, const std::string& value) -> absl::Status {
    int error = Rbd().rados_conf_set(cluster, option, value.c_str());
    if (error < 0)
      return Failed(-error, node_name, fmt::format("cannot set Ceph option {}", option));
    return absl::OkStatus();
  };
  absl::Status status;
  if (!options.server.empty()) status.Update(set("mon_host", MonHost(options.server)));
  if (!key.empty()) status.Update(set("key", key));
  std::fill(key.begin(), key.end(), '\0');
  if (!options.auth_client_required.empty()) {
    status.Update(set("auth_client_required", AuthModes(options.auth_client_required)));
  }
  // librbd's cache stays off, whatever cache.direct says (QEMU turns it on for cache.direct=off).
  // bexd never lets librbd acknowledge a write before the OSDs have it (a failed flush would
  // otherwise leave acknowledged writes lost behind a later successful flush), and without that
  // the cache only serves re-reads, which the client's own page cache serves already. Off, most
  // 4 KiB cells gained; sequential reads lost its read-ahead (figures in docs/remote-storage.md).
  status.Update(set("rbd_cache", "false"));
  if (ConfSeconds(cluster, "rados_osd_op_timeout") == 0) {
    status.Update(set("rados_osd_op_timeout", std::to_string(kOsdOpTimeoutSeconds)));
  }
  if (ConfSeconds(cluster, "client_mount_timeout") == 300) {  // Ceph's default
    status.Update(set("client_mount_timeout", std::to_string(kMountTimeoutSeconds)));
  }
  if (!status.ok()) return status;

  r = Rbd().rados_connect(cluster);
  if (r < 0) {
    std::string what = "cannot connect to the Ceph cluster";
    if ((r == -EACCES || r == -EPERM || r == -EINVAL) && key_looks_encoded) {
      what +=
          fmt::format(" (the secret '{}' holds the key's base64 text; give it with format=base64)",
                      *options.key_secret);
    } else if (r == -ETIMEDOUT) {
      what += fmt::format(" within client_mount_timeout ({} s)",
                          ConfSeconds(cluster, "client_mount_timeout"));
    }
    return Failed(-r, node_name, what);
  }
  r = Rbd().rados_ioctx_create(cluster, options.pool.c_str(), &connection->ioctx_);
  if (r < 0) {
    connection->ioctx_ = nullptr;
    if (r == -ENOENT) {
      return absl::NotFoundError(
          fmt::format("node '{}': pool '{}' does not exist", node_name, options.pool));
    }
    return Failed(-r, node_name, fmt::format("cannot open pool '{}'", options.pool));
  }
  if (!options.name_space.empty()) {
    bool exists = false;
    r = Rbd().rbd_namespace_exists(connection->ioctx_, options.name_space.c_str(), &exists);
    if (r < 0) {
      return Failed(-r, node_name,
                    fmt::format("cannot look up namespace '{}' in pool '{}'", options.name_space,
                                options.pool));
    }
    if (!exists) {
      return absl::NotFoundError(
          fmt::format("node '{}': namespace '{}' does not exist in pool '{}'", node_name,
                      options.name_space, options.pool));
    }
    Rbd().rados_ioctx_set_namespace(connection->ioctx_, options.name_space.c_str());
  }
  return connection;
}

RadosConnection::~RadosConnection() {
  if (ioctx_ != nullptr) Rbd().rados_ioctx_destroy(ioctx_);
  if (cluster_ != nullptr) Rbd().rados_shutdown(cluster_);
}

}  // namespace bexd::block
