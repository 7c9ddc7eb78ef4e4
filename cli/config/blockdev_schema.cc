// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/blockdev_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/config/json_text.h"
#include "cli/config/names.h"
#include "cli/config/paths.h"
#include "util/log.h"

namespace bexd::cli {
namespace {

using block::AioMode;
using block::ChildRef;
using block::DiscardMode;
using block::LockingMode;
using nlohmann::json;

absl::StatusOr<block::BlockdevOptions> ParseNode(const json& object, Syntax syntax,
                                                 const std::string& path, bool inline_child);

block::FileOptions ReadFileOptions(OptionReader& reader) {
  block::FileOptions file;
  reader.RequiredString("filename", &file.filename);
  if (reader.ok()) file.filename = AbsolutePath(file.filename);
  reader.Enum("aio", &file.aio,
              {{"native", AioMode::kNative},
               {"threads", AioMode::kThreads},
               {"io_uring", AioMode::kIoUring}});
  reader.Enum("locking", &file.locking,
              {{"auto", LockingMode::kAuto}, {"on", LockingMode::kOn}, {"off", LockingMode::kOff}});
  reader.Integer("aio-max-batch", &file.aio_max_batch, 0, INT32_MAX);
  // QEMU drops the host page cache when a migration ends; bexd takes part in no migration, so
  // there is never anything to drop, whatever the value.
  bool drop_cache = true;
  reader.Bool("drop-cache", &drop_cache);
  if (reader.Value("pr-manager") != nullptr) {
    reader.Fail("pr-manager",
                "SCSI persistent reservations are not supported by bexd (FUSE and vhost-user-fs "
                "exports send no SCSI commands)");
  }
  if (reader.Value("x-check-cache-dropped") != nullptr) {
    reader.Fail("x-check-cache-dropped",
                "not supported by bexd (a QEMU debugging option for migrations)");
  }
  return file;
}

block::NullOptions ReadNullOptions(OptionReader& reader) {
  block::NullOptions null;
  reader.Size("size", &null.size);
  reader.Bool("read-zeroes", &null.read_zeroes);
  reader.Integer("latency-ns", &null.latency_ns);
  return null;
}

block::RawOptions ReadRawOptions(OptionReader& reader) {
  block::RawOptions raw;
  reader.Size("offset", &raw.offset);
  uint64_t size = 0;
  reader.Size("size", &size);
  if (reader.Has("size")) raw.size = size;
  return raw;
}

block::Qcow2Options ReadQcow2Options(OptionReader& reader) {
  block::Qcow2Options qcow2;
  // Read even when absent, so that the key counts as known in errors.
  auto optional_size = [&](std::string_view key, std::optional<uint64_t>* out) {
    uint64_t value = 0;
    reader.Size(key, &value);
    if (reader.Has(key)) *out = value;
  };
  bool lazy = false;
  reader.Bool("lazy-refcounts", &lazy);
  if (reader.Has("lazy-refcounts")) qcow2.lazy_refcounts = lazy;
  optional_size("cache-size", &qcow2.cache_size);
  optional_size("l2-cache-size", &qcow2.l2_cache_size);
  optional_size("refcount-cache-size", &qcow2.refcount_cache_size);
  reader.Integer("cache-clean-interval", &qcow2.cache_clean_interval, 0, UINT32_MAX);
  optional_size("l2-cache-entry-size", &qcow2.l2_cache_entry_size);
  bool pass = false;
  reader.Bool("pass-discard-request", &pass);
  if (reader.Has("pass-discard-request")) qcow2.pass_discard_request = pass;
  reader.Bool("pass-discard-other", &qcow2.pass_discard_other);
  bool pass_snapshot = true;  // bexd deletes no internal snapshots, so nothing is freed there
  reader.Bool("pass-discard-snapshot", &pass_snapshot);
  // QEMU's metadata overlap checks; bexd's own (no cluster that holds metadata is ever handed
  // out for data) are always on, whichever mode is asked for.
  std::string overlap_check;
  reader.String("overlap-check", &overlap_check);
  if (reader.ok() && reader.Has("overlap-check") && overlap_check != "none" &&
      overlap_check != "constant" && overlap_check != "cached" && overlap_check != "all") {
    reader.Fail("overlap-check",
                "expected one of none, constant, cached, all; got '" + overlap_check + "'");
  }
  return qcow2;
}

// QEMU's BlockdevOptionsRbd. The `server` list is of {host, port} objects, both strings.
block::RbdOptions ReadRbdOptions(OptionReader& reader, Syntax syntax) {
  block::RbdOptions rbd;
  reader.RequiredString("pool", &rbd.pool);
  reader.String("namespace", &rbd.name_space);
  reader.RequiredString("image", &rbd.image);
  auto optional_string = [&](std::string_view key, std::optional<std::string>* out) {
    std::string value;
    reader.String(key, &value);
    if (reader.Has(key)) *out = std::move(value);
  };
  optional_string("snapshot", &rbd.snapshot);
  optional_string("conf", &rbd.conf);
  if (reader.ok() && rbd.conf) rbd.conf = AbsolutePath(*rbd.conf);
  optional_string("user", &rbd.user);
  optional_string("key-secret", &rbd.key_secret);
  std::vector<std::string> modes;
  reader.StringList("auth-client-required", &modes);
  for (const std::string& mode : modes) {
    if (mode != "cephx" && mode != "none") {
      reader.Fail("auth-client-required",
                  "expected a list of cephx and none; got " + OptionReader::Quote(mode));
    }
    rbd.auth_client_required.push_back(mode == "cephx" ? block::RbdAuthMode::kCephx
                                                       : block::RbdAuthMode::kNone);
  }
  if (const json* servers = reader.Value("server")) {
    if (!servers->is_array()) reader.Fail("server", "expected a list of {host, port} objects");
    for (size_t i = 0; reader.ok() && i < servers->size(); ++i) {
      OptionReader server((*servers)[i], syntax, fmt::format("{}[{}]", reader.PathOf("server"), i));
      block::InetAddress address;
      server.RequiredString("host", &address.host);
      server.RequiredString("port", &address.port);
      absl::Status status = server.Finish();
      if (!status.ok()) reader.Fail(status);
      rbd.server.push_back(std::move(address));
    }
  }
  if (reader.Value("encrypt") != nullptr) {
    reader.Fail("encrypt", "LUKS encryption of rbd images is not supported by bexd");
  }
  return rbd;
}

// QEMU's BlockdevOptionsNbd; `server` is a SocketAddress of type inet or unix.
block::NbdOptions ReadNbdOptions(OptionReader& reader) {
  using Transport = block::NbdOptions::Transport;
  block::NbdOptions nbd;
  OptionReader& server = reader.Child("server");
  std::string type;
  server.RequiredString("type", &type);
  if (type == "inet") {
    nbd.transport = Transport::kInet;
    server.RequiredString("host", &nbd.host);
    server.RequiredString("port", &nbd.port);
  } else if (type == "unix") {
    nbd.transport = Transport::kUnix;
    server.RequiredString("path", &nbd.path);
    if (server.ok()) nbd.path = AbsolutePath(nbd.path);
  } else if (server.ok()) {
    server.Fail("type", "'" + type + "' is not supported by bexd (supported: inet, unix)");
  }
  reader.String("export", &nbd.export_name);
  reader.String("tls-creds", &nbd.tls_creds);
  reader.String("tls-hostname", &nbd.tls_hostname);
  if (reader.ok() && reader.Has("tls-hostname") && nbd.tls_creds.empty()) {
    reader.Fail("tls-hostname", "needs tls-creds (a name to check the server's certificate for)");
  }
  if (reader.Value("x-dirty-bitmap") != nullptr) {
    reader.Fail("x-dirty-bitmap",
                "not supported by bexd (QEMU's experimental way to read a dirty bitmap as block "
                "status)");
  }
  reader.Integer("reconnect-delay", &nbd.reconnect_delay, 0, UINT32_MAX);
  reader.Integer("open-timeout", &nbd.open_timeout, 0, UINT32_MAX);
  return nbd;
}

void SetDefault(json* object, const std::string& key, const json& value) {
  if (!object->contains(key)) (*object)[key] = value;
}

// QEMU's inherited options (bdrv_inherited_options, bdrv_backing_options): a child defined
// inline takes its parent's cache.direct and cache.no-flush unless it sets them. A file child
// also takes the parent's read-only, auto-read-only and force-share and passes discards on (unmap:
// the format node above decides whether they reach it); a backing child is read-only unless it says
// otherwise.
json InheritedOptions(const json& parent, json child, std::string_view role, Syntax syntax) {
  if (auto cache = parent.find("cache"); cache != parent.end() && cache->is_object()) {
    json& child_cache = child["cache"];
    if (child_cache.is_null()) child_cache = json::object();
    if (child_cache.is_object()) {
      for (const char* key : {"direct", "no-flush"}) {
        if (cache->contains(key)) SetDefault(&child_cache, key, (*cache)[key]);
      }
    }
  }
  if (role == "backing") {
    SetDefault(&child, "read-only", syntax == Syntax::kJson ? json(true) : json("on"));
    return child;
  }
  if (parent.contains("read-only")) SetDefault(&child, "read-only", parent["read-only"]);
  if (parent.contains("force-share")) SetDefault(&child, "force-share", parent["force-share"]);
  if (parent.contains("auto-read-only")) {
    SetDefault(&child, "auto-read-only", parent["auto-read-only"]);
  }
  SetDefault(&child, "discard", "unmap");
  return child;
}

// A BlockdevRef (`file`) or BlockdevRefOrNull (`backing`, nullable): a node name, the child's
// own options, or null. Keyval cannot say null, so there `backing=null` means it, and so does
// QEMU 7.2's spelling `backing=` (deprecated there, with a warning; accepted alike here).
std::optional<ChildRef> ReadChild(OptionReader& reader, const json& parent, Syntax syntax,
                                  const std::string& role, bool required, bool nullable) {
  const json* value = reader.Value(role);
  if (!reader.ok()) return std::nullopt;
  if (value == nullptr) {
    if (required) reader.Fail(role, "missing (required)");
    return std::nullopt;
  }
  const bool keyval_null =
      syntax == Syntax::kKeyval && value->is_string() && value->get<std::string>() == "null";
  if (nullable && (value->is_null() || keyval_null)) return ChildRef{.kind = ChildRef::Kind::kNull};
  if (nullable && value->is_string() && value->get<std::string>().empty()) {
    log::Warn("{}: use of \"{}\": \"\" is deprecated; use \"{}\": null instead",
              reader.PathOf(role), role, role);
    return ChildRef{.kind = ChildRef::Kind::kNull};
  }
  if (value->is_string()) {
    std::string name = value->get<std::string>();
    if (name.empty()) reader.Fail(role, "must not be empty");
    return ChildRef{.kind = ChildRef::Kind::kReference, .node_name = std::move(name)};
  }
  if (value->is_object()) {
    absl::StatusOr<block::BlockdevOptions> child =
        ParseNode(InheritedOptions(parent, *value, role, syntax), syntax, reader.PathOf(role),
                  /*inline_child=*/true);
    if (!child.ok()) {
      reader.Fail(child.status());
      return std::nullopt;
    }
    return ChildRef{.kind = ChildRef::Kind::kInline,
                    .options = std::make_shared<block::BlockdevOptions>(*std::move(child))};
  }
  reader.Fail(role, fmt::format("expected a node name{}, got {}",
                                nullable ? ", a node's options or null" : " or a node's options",
                                DumpJson(*value)));
  return std::nullopt;
}

absl::StatusOr<block::BlockdevOptions> ParseNode(const json& object, Syntax syntax,
                                                 const std::string& path, bool inline_child) {
  OptionReader reader(object, syntax, path);
  block::BlockdevOptions options;
  std::string driver;
  reader.RequiredString("driver", &driver);
  if (inline_child) {
    reader.String("node-name", &options.node_name);
  } else {
    reader.RequiredString("node-name", &options.node_name);
  }
  if (reader.ok() && !options.node_name.empty()) {
    absl::Status name_status = CheckNodeName(options.node_name);
    if (!name_status.ok()) reader.Fail("node-name", std::string(name_status.message()));
  }
  reader.Bool("read-only", &options.read_only);
  reader.Bool("auto-read-only", &options.auto_read_only);
  reader.Bool("force-share", &options.force_share);
  if (reader.ok() && options.force_share && !options.read_only) {
    // QEMU's text (bdrv_open_common).
    reader.Fail("force-share", "force-share=on can only be used with read-only images");
  }

  // QEMU accepts the cache, discard and detect-zeroes options for every driver: `file` acts on
  // all of them, `rbd` on cache.no-flush and discard (librbd's cache is always off, see
  // block/rbd/rados_connection.cc), the other drivers on discard, the block layer on
  // detect-zeroes (block/block_node.cc), and children defined inline inherit the cache options.
  bool cache_direct = false;
  bool cache_no_flush = false;
  DiscardMode discard = DiscardMode::kIgnore;
  OptionReader& cache = reader.Child("cache");
  cache.Bool("direct", &cache_direct);
  cache.Bool("no-flush", &cache_no_flush);
  reader.Enum("discard", &discard,
              {{"ignore", DiscardMode::kIgnore},
               {"off", DiscardMode::kIgnore},
               {"unmap", DiscardMode::kUnmap},
               {"on", DiscardMode::kUnmap}});
  reader.Enum("detect-zeroes", &options.detect_zeroes,
              {{"off", block::DetectZeroes::kOff},
               {"on", block::DetectZeroes::kOn},
               {"unmap", block::DetectZeroes::kUnmap}});
  if (reader.ok() && options.detect_zeroes == block::DetectZeroes::kUnmap &&
      discard != DiscardMode::kUnmap) {
    // QEMU's text (bdrv_parse_detect_zeroes); it refuses this rather than acting as `on`.
    reader.Fail("detect-zeroes",
                "setting detect-zeroes to unmap is not allowed without setting discard operation "
                "to unmap");
  }

  if (driver == "file" || driver == "host_device") {
    block::FileOptions file = ReadFileOptions(reader);
    file.host_device = driver == "host_device";
    file.cache_direct = cache_direct;
    file.cache_no_flush = cache_no_flush;
    file.discard = discard;
    file.force_share = options.force_share;
    options.driver = std::move(file);
  } else if (driver == "null-co" || driver == "null") {
    options.driver = ReadNullOptions(reader);
  } else if (driver == "raw") {
    block::RawOptions raw = ReadRawOptions(reader);
    raw.discard = discard;
    options.driver = raw;
    options.file = ReadChild(reader, object, syntax, "file", /*required=*/true, false);
  } else if (driver == "qcow2") {
    block::Qcow2Options qcow2 = ReadQcow2Options(reader);
    qcow2.discard = discard;
    options.driver = qcow2;
    options.file = ReadChild(reader, object, syntax, "file", /*required=*/true, false);
    options.backing = ReadChild(reader, object, syntax, "backing", false, /*nullable=*/true);
  } else if (driver == "rbd") {
    block::RbdOptions rbd = ReadRbdOptions(reader, syntax);
    rbd.cache_no_flush = cache_no_flush;
    rbd.discard = discard;
    options.driver = std::move(rbd);
  } else if (driver == "nbd") {
    block::NbdOptions nbd = ReadNbdOptions(reader);
    nbd.discard = discard;
    options.driver = std::move(nbd);
  } else if (reader.ok()) {
    reader.Fail("driver", fmt::format("'{}' is not supported by bexd (supported: {})", driver,
                                      fmt::join(kBlockDrivers, ", ")));
  }
  absl::Status status = reader.Finish();
  if (!status.ok()) return status;
  return options;
}

}  // namespace

absl::StatusOr<block::BlockdevOptions> ParseBlockdevOptions(const json& object, Syntax syntax,
                                                            const std::string& path) {
  return ParseNode(object, syntax, path, /*inline_child=*/false);
}

}  // namespace bexd::cli
