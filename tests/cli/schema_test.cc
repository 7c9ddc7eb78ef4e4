// SPDX-License-Identifier: GPL-2.0-or-later
// The shared schema layer: keyval and JSON spellings give the same options, and every bad input
// gives one message naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/config/blockdev_schema.h"
#include "cli/config/control_schema.h"
#include "cli/config/export_schema.h"
#include "cli/config/json_text.h"
#include "cli/config/keyval.h"
#include "tests/cli/bexd_process.h"
#include "tests/cli/keyval_json.h"

namespace bexd::cli {
namespace {

using nlohmann::json;

std::string BlockdevError(const json& object, Syntax syntax, const std::string& path = "") {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(object, syntax, path);
  EXPECT_FALSE(options.ok()) << object.dump();
  return options.ok() ? "" : std::string(options.status().message());
}

std::string ExportError(const json& object, Syntax syntax) {
  absl::StatusOr<ExportSpec> spec = ParseExportOptions(object, syntax);
  EXPECT_FALSE(spec.ok()) << object.dump();
  return spec.ok() ? "" : std::string(spec.status().message());
}

class SchemaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir_.path();
    mountpoint_ = temp_dir_.File("mnt", 1);
  }

  bexd::testing::TempDir temp_dir_;
  std::string dir_;
  std::string mountpoint_;
};

TEST(BlockdevSchemaTest, FileFromKeyval) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
      Keyval("driver=file,node-name=disk0,filename=/img/disk.img,cache.direct=on,"
             "cache.no-flush=yes,aio=threads,discard=unmap,locking=off,read-only=true"),
      Syntax::kKeyval);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->node_name, "disk0");
  EXPECT_TRUE(options->read_only);
  const auto& file = std::get<block::FileOptions>(options->driver);
  EXPECT_EQ(file.filename, "/img/disk.img");
  EXPECT_TRUE(file.cache_direct);
  EXPECT_TRUE(file.cache_no_flush);
  EXPECT_EQ(file.aio, block::AioMode::kThreads);
  EXPECT_EQ(file.discard, block::DiscardMode::kUnmap);
  EXPECT_EQ(file.locking, block::LockingMode::kOff);
}

// QEMU's other BlockdevOptionsFile keys: aio-max-batch is honoured, drop-cache has nothing to
// drop in a daemon that takes part in no migration, the rest is refused with a reason.
TEST(BlockdevSchemaTest, FileAioMaxBatchDropCacheAndRefusedKeys) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
      Keyval("driver=file,node-name=d,filename=/img/disk.img,aio-max-batch=8,drop-cache=off"),
      Syntax::kKeyval);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(std::get<block::FileOptions>(options->driver).aio_max_batch, 8u);
  EXPECT_EQ(std::get<block::FileOptions>(
                ParseBlockdevOptions(Keyval("driver=file,node-name=d,filename=/i"), Syntax::kKeyval)
                    ->driver)
                .aio_max_batch,
            0u);
  EXPECT_EQ(BlockdevError(Keyval("driver=file,node-name=d,filename=/i,aio-max-batch=-1"),
                          Syntax::kKeyval),
            "aio-max-batch: expected a non-negative integer, got \"-1\"");
  EXPECT_EQ(
      BlockdevError(Keyval("driver=file,node-name=d,filename=/i,pr-manager=pr0"), Syntax::kKeyval),
      "pr-manager: SCSI persistent reservations are not supported by bexd (FUSE and "
      "vhost-user-fs exports send no SCSI commands)");
  EXPECT_EQ(BlockdevError(Keyval("driver=file,node-name=d,filename=/i,x-check-cache-dropped=on"),
                          Syntax::kKeyval),
            "x-check-cache-dropped: not supported by bexd (a QEMU debugging option for "
            "migrations)");
}

// force-share, as QEMU: only with read-only=on, and inherited by a file child defined inline.
TEST(BlockdevSchemaTest, ForceShare) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
      Keyval("driver=qcow2,node-name=q,read-only=on,force-share=on,file.driver=file,"
             "file.filename=/img/vm.qcow2"),
      Syntax::kKeyval);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->force_share);
  ASSERT_TRUE(options->file.has_value());
  ASSERT_NE(options->file->options, nullptr);
  EXPECT_TRUE(options->file->options->force_share);
  EXPECT_TRUE(std::get<block::FileOptions>(options->file->options->driver).force_share);
  EXPECT_EQ(
      BlockdevError(Keyval("driver=file,node-name=d,filename=/i,force-share=on"), Syntax::kKeyval),
      "force-share: force-share=on can only be used with read-only images");
}

TEST(BlockdevSchemaTest, HostDevice) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
      Keyval("driver=host_device,node-name=disk0,filename=/dev/loop0,aio=native,cache.direct=on"),
      Syntax::kKeyval);
  ASSERT_TRUE(options.ok()) << options.status();
  const auto& file = std::get<block::FileOptions>(options->driver);
  EXPECT_TRUE(file.host_device);
  EXPECT_EQ(file.filename, "/dev/loop0");
  EXPECT_TRUE(file.cache_direct);
}

TEST(BlockdevSchemaTest, AioIoUring) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
      Keyval("driver=file,node-name=disk0,filename=/img/disk.img,aio=io_uring"), Syntax::kKeyval);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(std::get<block::FileOptions>(options->driver).aio, block::AioMode::kIoUring);
}

TEST(BlockdevSchemaTest, FileFromJsonMatchesKeyval) {
  absl::StatusOr<json> object = ParseJsonText(
      R"({"driver":"file","node-name":"disk0","filename":"/img/disk.img",
          "cache":{"direct":true},"aio":"native","discard":"ignore"})");
  ASSERT_TRUE(object.ok());
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(*object, Syntax::kJson);
  ASSERT_TRUE(options.ok()) << options.status();
  const auto& file = std::get<block::FileOptions>(options->driver);
  EXPECT_TRUE(file.cache_direct);
  EXPECT_FALSE(file.cache_no_flush);
  EXPECT_EQ(file.aio, block::AioMode::kNative);
  EXPECT_EQ(file.discard, block::DiscardMode::kIgnore);
  EXPECT_EQ(file.locking, block::LockingMode::kAuto);
}

TEST(BlockdevSchemaTest, RelativeFilenameBecomesAbsolute) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
      Keyval("driver=file,node-name=d,filename=sub/../disk.img"), Syntax::kKeyval);
  ASSERT_TRUE(options.ok()) << options.status();
  std::string expected = std::filesystem::current_path() / "disk.img";
  EXPECT_EQ(std::get<block::FileOptions>(options->driver).filename, expected);
}

TEST(BlockdevSchemaTest, NullAndItsAlias) {
  for (std::string_view driver : {"null-co", "null"}) {
    absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
        Keyval(std::string(driver) + ",node-name=n0,size=64M,read-zeroes=on,latency-ns=1000",
               "driver"),
        Syntax::kKeyval);
    ASSERT_TRUE(options.ok()) << options.status();
    const auto& null = std::get<block::NullOptions>(options->driver);
    EXPECT_EQ(null.size, uint64_t{64} << 20);
    EXPECT_TRUE(null.read_zeroes);
    EXPECT_EQ(null.latency_ns, 1000u);
  }
}

TEST(BlockdevSchemaTest, SizeSuffixes) {
  struct Case {
    std::string_view text;
    uint64_t bytes;
  } cases[] = {{"512", 512},
               {"4k", 4096},
               {"4K", 4096},
               {"1G", uint64_t{1} << 30},
               {"2T", uint64_t{2} << 40},
               {"1E", uint64_t{1} << 60}};
  for (const Case& c : cases) {
    absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
        Keyval("driver=null-co,node-name=n,size=" + std::string(c.text)), Syntax::kKeyval);
    ASSERT_TRUE(options.ok()) << c.text << ": " << options.status();
    EXPECT_EQ(std::get<block::NullOptions>(options->driver).size, c.bytes) << c.text;
  }
  EXPECT_EQ(BlockdevError(Keyval("driver=null-co,node-name=n,size=16E"), Syntax::kKeyval),
            "size: expected a size in bytes (an integer, optionally with a k, M, G, T, P or E "
            "suffix), got \"16E\"");
  EXPECT_EQ(BlockdevError(Keyval("driver=null-co,node-name=n,size=1.5G"), Syntax::kKeyval),
            "size: expected a size in bytes (an integer, optionally with a k, M, G, T, P or E "
            "suffix), got \"1.5G\"");
  // Past INT64_MAX no offset can reach the end: refused, not served as EIO.
  EXPECT_EQ(BlockdevError(Keyval("driver=null-co,node-name=n,size=8E"), Syntax::kKeyval),
            "size: must be at most 9223372036854775807, got 9223372036854775808");
  json object = {{"driver", "null-co"}, {"node-name", "n"}, {"size", UINT64_MAX}};
  EXPECT_EQ(BlockdevError(object, Syntax::kJson),
            "size: must be at most 9223372036854775807, got 18446744073709551615");
  object["size"] = uint64_t{INT64_MAX};
  EXPECT_TRUE(ParseBlockdevOptions(object, Syntax::kJson).ok());
}

TEST(BlockdevSchemaTest, KeyvalErrorsNameTheKey) {
  EXPECT_EQ(BlockdevError(Keyval("driver=file,node-name=d,filename=x,cache.direct=maybe"),
                          Syntax::kKeyval),
            "cache.direct: expected on or off, got \"maybe\"");
  EXPECT_EQ(BlockdevError(Keyval("driver=file,node-name=d"), Syntax::kKeyval),
            "filename: missing (required)");
  EXPECT_EQ(BlockdevError(Keyval("node-name=d,filename=x"), Syntax::kKeyval),
            "driver: missing (required)");
  EXPECT_EQ(BlockdevError(Keyval("driver=file,node-name=d,filename=x,aio=posix"), Syntax::kKeyval),
            "aio: expected one of native, threads, io_uring; got \"posix\"");
  EXPECT_EQ(BlockdevError(Keyval("driver=vmdk,node-name=d"), Syntax::kKeyval),
            "driver: 'vmdk' is not supported by bexd (supported: file, host_device, nbd, null-co, "
            "qcow2, raw, rbd)");
  EXPECT_EQ(BlockdevError(Keyval("driver=null-co,node-name=d,latency-ns=-1"), Syntax::kKeyval),
            "latency-ns: expected a non-negative integer, got \"-1\"");
  EXPECT_EQ(BlockdevError(Keyval("driver=null-co,node-name=9d"), Syntax::kKeyval),
            "node-name: '9d' must start with a letter (then letters, digits, -, . or _)");
  // QEMU's limit for node names: 31 bytes.
  EXPECT_TRUE(ParseBlockdevOptions(Keyval("driver=null-co,node-name=" + std::string(31, 'n')),
                                   Syntax::kKeyval)
                  .ok());
  EXPECT_EQ(
      BlockdevError(Keyval("driver=null-co,node-name=" + std::string(32, 'n')), Syntax::kKeyval),
      "node-name: Node name too long (at most 31 bytes)");
  // QEMU's keyval booleans include y and n.
  for (const char* yes : {"on", "yes", "true", "y"}) {
    absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
        Keyval(std::string("driver=null-co,node-name=d,read-only=") + yes), Syntax::kKeyval);
    ASSERT_TRUE(options.ok()) << yes << ": " << options.status();
    EXPECT_TRUE(options->read_only) << yes;
  }
  for (const char* no : {"off", "no", "false", "n"}) {
    absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
        Keyval(std::string("driver=null-co,node-name=d,read-only=") + no), Syntax::kKeyval);
    ASSERT_TRUE(options.ok()) << no << ": " << options.status();
    EXPECT_FALSE(options->read_only) << no;
  }
  EXPECT_EQ(BlockdevError(Keyval("driver=null-co,node-name=d,filename=x"), Syntax::kKeyval),
            "filename: unknown option (known here: auto-read-only, cache, detect-zeroes, discard, "
            "driver, force-share, latency-ns, node-name, read-only, read-zeroes, size)");
  EXPECT_EQ(BlockdevError(Keyval("driver=file,node-name=d,filename=x,cache.writeback=on"),
                          Syntax::kKeyval),
            "cache.writeback: unknown option (known here: direct, no-flush)");
}

TEST(BlockdevSchemaTest, JsonIsStrictlyTyped) {
  json base = {{"driver", "null-co"}, {"node-name", "n"}};
  json object = base;
  object["size"] = "1G";
  EXPECT_EQ(BlockdevError(object, Syntax::kJson),
            "size: expected a size in bytes (a non-negative integer), got \"1G\"");
  object = base;
  object["read-zeroes"] = "on";
  EXPECT_EQ(BlockdevError(object, Syntax::kJson),
            "read-zeroes: expected true or false, got \"on\"");
  object = base;
  object["cache"] = true;
  EXPECT_EQ(BlockdevError(object, Syntax::kJson), "cache: expected a JSON object, got true");
  EXPECT_EQ(BlockdevError(json::array(), Syntax::kJson, "blockdev[3]"),
            "blockdev[3]: expected a JSON object, got []");
  object = base;
  object["size"] = -5;
  EXPECT_EQ(BlockdevError(object, Syntax::kJson, "blockdev[0]"),
            "blockdev[0].size: expected a size in bytes (a non-negative integer), got -5");
  // -0 is 0, as QEMU reads it.
  absl::StatusOr<block::BlockdevOptions> zero = ParseBlockdevOptions(
      json::parse(R"({"driver": "null-co", "node-name": "n", "size": -0})"), Syntax::kJson);
  ASSERT_TRUE(zero.ok()) << zero.status();
}

// QEMU's BlockdevOptionsNbd: the server as a SocketAddress, the export, reconnect-delay,
// open-timeout, tls-creds, tls-hostname.
TEST(BlockdevSchemaTest, NbdAsQemuWritesIt) {
  absl::StatusOr<block::BlockdevOptions> inet = ParseBlockdevOptions(
      Keyval("driver=nbd,node-name=n0,server.type=inet,server.host=10.0.0.1,server.port=10809,"
             "export=disk,reconnect-delay=30,open-timeout=5,tls-creds=tls0,"
             "tls-hostname=nbd.example"),
      Syntax::kKeyval);
  ASSERT_TRUE(inet.ok()) << inet.status();
  const auto& nbd = std::get<block::NbdOptions>(inet->driver);
  EXPECT_EQ(nbd.transport, block::NbdOptions::Transport::kInet);
  EXPECT_EQ(nbd.host, "10.0.0.1");
  EXPECT_EQ(nbd.port, "10809");
  EXPECT_EQ(nbd.export_name, "disk");
  EXPECT_EQ(nbd.reconnect_delay, 30u);
  EXPECT_EQ(nbd.open_timeout, 5u);
  EXPECT_EQ(nbd.tls_creds, "tls0");
  EXPECT_EQ(nbd.tls_hostname, "nbd.example");
  EXPECT_FALSE(nbd.tls.has_value()) << "the credentials are looked up when the node opens";

  absl::StatusOr<block::BlockdevOptions> unix_socket =
      ParseBlockdevOptions(json{{"driver", "nbd"},
                                {"node-name", "n0"},
                                {"server", {{"type", "unix"}, {"path", "/run/nbd.sock"}}}},
                           Syntax::kJson);
  ASSERT_TRUE(unix_socket.ok()) << unix_socket.status();
  const auto& local = std::get<block::NbdOptions>(unix_socket->driver);
  EXPECT_EQ(local.transport, block::NbdOptions::Transport::kUnix);
  EXPECT_EQ(local.path, "/run/nbd.sock");
  EXPECT_EQ(local.export_name, "");
  EXPECT_EQ(local.reconnect_delay, 0u);
  EXPECT_EQ(local.open_timeout, 0u);
  EXPECT_EQ(local.tls_creds, "");
}

TEST(BlockdevSchemaTest, NbdErrors) {
  EXPECT_EQ(BlockdevError(Keyval("driver=nbd,node-name=n0"), Syntax::kKeyval),
            "server.type: missing (required)");
  EXPECT_EQ(BlockdevError(Keyval("driver=nbd,node-name=n0,server.type=inet,server.host=h"),
                          Syntax::kKeyval),
            "server.port: missing (required)");
  EXPECT_EQ(BlockdevError(Keyval("driver=nbd,node-name=n0,server.type=vsock,server.cid=3"),
                          Syntax::kKeyval),
            "server.type: 'vsock' is not supported by bexd (supported: inet, unix)");
  EXPECT_EQ(BlockdevError(Keyval("driver=nbd,node-name=n0,server.type=unix,server.path=/s,"
                                 "reconnect-delay=-1"),
                          Syntax::kKeyval),
            "reconnect-delay: expected a non-negative integer, got \"-1\"");
  EXPECT_EQ(BlockdevError(Keyval("driver=nbd,node-name=n0,server.type=unix,server.path=/s,"
                                 "tls-hostname=h"),
                          Syntax::kKeyval),
            "tls-hostname: needs tls-creds (a name to check the server's certificate for)");
  EXPECT_EQ(BlockdevError(Keyval("driver=nbd,node-name=n0,server.type=unix,server.path=/s,"
                                 "x-dirty-bitmap=qemu:dirty-bitmap:b0"),
                          Syntax::kKeyval),
            "x-dirty-bitmap: not supported by bexd (QEMU's experimental way to read a dirty "
            "bitmap as block status)");
  EXPECT_EQ(BlockdevError(Keyval("driver=nbd,node-name=n0,server.type=unix,server.path=/s,"
                                 "open-timeout=-1"),
                          Syntax::kKeyval),
            "open-timeout: expected a non-negative integer, got \"-1\"");
  EXPECT_EQ(BlockdevError(Keyval("driver=nbd,node-name=n0,server.type=unix,server.path=/s,"
                                 "connect-timeout=5"),
                          Syntax::kKeyval),
            "connect-timeout: unknown option (known here: auto-read-only, cache, detect-zeroes, "
            "discard, driver, export, force-share, node-name, open-timeout, read-only, "
            "reconnect-delay, "
            "server, tls-creds, tls-hostname, x-dirty-bitmap)");
}

TEST_F(SchemaTest, FuseExportFromKeyvalAsQsdWritesIt) {
  absl::StatusOr<ExportSpec> spec = ParseExportOptions(
      Keyval("type=fuse,id=exp0,node-name=disk0,mountpoint=" + mountpoint_ +
             ",writable=on,growable=off,allow-other=off,writethrough=on,iothread=t0"),
      Syntax::kKeyval);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->options.id, "exp0");
  EXPECT_EQ(spec->options.node_name, "disk0");
  EXPECT_TRUE(spec->options.writable);
  EXPECT_TRUE(spec->options.writethrough);
  EXPECT_EQ(spec->iothreads, std::vector<std::string>{"t0"});
  const auto& fuse = std::get<exports::FuseExportOptions>(spec->options.transport);
  EXPECT_EQ(fuse.mountpoint, mountpoint_);
  EXPECT_EQ(fuse.allow_other, exports::AllowOther::kOff);
  EXPECT_FALSE(fuse.growable);
  EXPECT_EQ(fuse.num_queues, 0u);
}

TEST_F(SchemaTest, IothreadListSetsQueueCount) {
  absl::StatusOr<ExportSpec> spec = ParseExportOptions(
      Keyval("fuse,id=e,node-name=d,mountpoint=" + mountpoint_ + ",iothread.0=a,iothread.1=b",
             "type"),
      Syntax::kKeyval);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(std::get<exports::FuseExportOptions>(spec->options.transport).num_queues, 2u);
  EXPECT_EQ(ExportError(Keyval("type=fuse,id=e,node-name=d,mountpoint=" + mountpoint_ +
                               ",iothread.0=a,iothread.1=b,num-queues=3"),
                        Syntax::kKeyval),
            "num-queues: 3 conflicts with the 2 threads named by iothread");
}

TEST_F(SchemaTest, FuseExportErrors) {
  std::string base = "type=fuse,id=e,node-name=d,mountpoint=";
  EXPECT_EQ(ExportError(Keyval(base + mountpoint_ + ",num-queues=two"), Syntax::kKeyval),
            "num-queues: expected a positive integer, got \"two\"");
  EXPECT_EQ(ExportError(Keyval(base + mountpoint_ + ",num-queues=0"), Syntax::kKeyval),
            "num-queues: must be at least 1, got 0");
  EXPECT_EQ(ExportError(Keyval(base + mountpoint_ + ",allow-other=maybe"), Syntax::kKeyval),
            "allow-other: expected one of off, on, auto; got \"maybe\"");
  EXPECT_EQ(ExportError(Keyval(base + dir_), Syntax::kKeyval),
            "'" + dir_ + "' is not a regular file");
  EXPECT_EQ(ExportError(Keyval(base + dir_ + "/missing"), Syntax::kKeyval),
            "Failed to stat '" + dir_ + "/missing': No such file or directory");
  EXPECT_EQ(ExportError(Keyval("type=nbd,id=e,node-name=d"), Syntax::kKeyval),
            "type: 'nbd' is not supported by bexd (supported: fuse, vhost-user-fs)");
  EXPECT_EQ(ExportError(Keyval("type=fuse,node-name=d,mountpoint=" + mountpoint_), Syntax::kKeyval),
            "id: missing (required)");
  EXPECT_EQ(ExportError(Keyval(base + mountpoint_ + ",tag=x"), Syntax::kKeyval),
            "tag: unknown option (known here: allow-other, fixed-iothread, growable, id, io-uring, "
            "io-uring-queue-depth, iothread, mountpoint, node-name, num-queues, passthrough, "
            "queue-cpus, type, writable, writethrough)");
  json object = {{"type", "fuse"},
                 {"id", "e"},
                 {"node-name", "d"},
                 {"mountpoint", mountpoint_},
                 {"num-queues", "two"}};
  EXPECT_EQ(ExportError(object, Syntax::kJson),
            "num-queues: expected a positive integer, got \"two\"");
}

TEST_F(SchemaTest, QueueCpusTakeACpuList) {
  absl::StatusOr<ExportSpec> spec = ParseExportOptions(
      Keyval("type=fuse,id=e,node-name=d,mountpoint=" + mountpoint_ + ",queue-cpus=2-3,,0"),
      Syntax::kKeyval);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(std::get<exports::FuseExportOptions>(spec->options.transport).queue_cpus,
            (std::vector<int>{0, 2, 3}));
  json object = {{"type", "vhost-user-fs"},
                 {"id", "v"},
                 {"node-name", "d"},
                 {"addr", {{"type", "unix"}, {"path", "/run/v.sock"}}},
                 {"tag", "t"},
                 {"queue-cpus", "1"}};
  spec = ParseExportOptions(object, Syntax::kJson);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(std::get<exports::VhostUserFsExportOptions>(spec->options.transport).queue_cpus,
            std::vector<int>{1});
  EXPECT_EQ(
      ExportError(Keyval("type=fuse,id=e,node-name=d,mountpoint=" + mountpoint_ + ",queue-cpus=1-"),
                  Syntax::kKeyval),
      "queue-cpus: '1-' is not a CPU list: a range needs an end, as in 0-3");
  object["queue-cpus"] = 1;
  EXPECT_EQ(ExportError(object, Syntax::kJson), "queue-cpus: expected a string, got 1");
}

TEST_F(SchemaTest, IoUringModeAndQueueDepth) {
  const std::string base = "type=fuse,id=e,node-name=d,mountpoint=" + mountpoint_;
  absl::StatusOr<ExportSpec> spec = ParseExportOptions(Keyval(base), Syntax::kKeyval);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& defaults = std::get<exports::FuseExportOptions>(spec->options.transport);
  EXPECT_EQ(defaults.io_uring, exports::IoUringMode::kOff);
  EXPECT_EQ(defaults.io_uring_queue_depth, 32u);
  spec =
      ParseExportOptions(Keyval(base + ",io-uring=auto,io-uring-queue-depth=8"), Syntax::kKeyval);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& fuse = std::get<exports::FuseExportOptions>(spec->options.transport);
  EXPECT_EQ(fuse.io_uring, exports::IoUringMode::kAuto);
  EXPECT_EQ(fuse.io_uring_queue_depth, 8u);
  EXPECT_EQ(ExportError(Keyval(base + ",io-uring=maybe"), Syntax::kKeyval),
            "io-uring: expected one of off, on, auto; got \"maybe\"");
  EXPECT_EQ(ExportError(Keyval(base + ",io-uring-queue-depth=0"), Syntax::kKeyval),
            "io-uring-queue-depth: must be at least 1, got 0");
}

TEST(ExportSchemaTest, VhostUserFs) {
  absl::StatusOr<ExportSpec> spec = ParseExportOptions(
      Keyval("type=vhost-user-fs,id=v0,node-name=disk0,addr.type=unix,addr.path=/run/v.sock,"
             "tag=share,writable=on,num-request-queues=2"),
      Syntax::kKeyval);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& vhost = std::get<exports::VhostUserFsExportOptions>(spec->options.transport);
  EXPECT_EQ(vhost.socket_path, "/run/v.sock");
  EXPECT_EQ(vhost.tag, "share");
  EXPECT_EQ(vhost.file_name, "disk0");
  EXPECT_EQ(vhost.num_request_queues, 2u);
  EXPECT_EQ(vhost.poll_max_ns, 32768u);  // QEMU's iothread default
  EXPECT_TRUE(spec->options.writable);
}

TEST(ExportSchemaTest, VhostUserFsPollMaxNs) {
  const std::string base =
      "type=vhost-user-fs,id=v0,node-name=disk0,addr.type=unix,addr.path=/run/v.sock,";
  absl::StatusOr<ExportSpec> spec =
      ParseExportOptions(Keyval(base + "poll-max-ns=0"), Syntax::kKeyval);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(std::get<exports::VhostUserFsExportOptions>(spec->options.transport).poll_max_ns, 0u);
  spec = ParseExportOptions(Keyval(base + "poll-max-ns=100000"), Syntax::kKeyval);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(std::get<exports::VhostUserFsExportOptions>(spec->options.transport).poll_max_ns,
            100000u);
  EXPECT_NE(ExportError(Keyval(base + "poll-max-ns=2000000000"), Syntax::kKeyval), "");
  EXPECT_NE(ExportError(Keyval(base + "poll-max-ns=-1"), Syntax::kKeyval), "");
}

// The tag only labels logs (the guest's tag is QEMU's vhost-user-fs-pci tag=), so it may be left
// out.
TEST(ExportSchemaTest, VhostUserFsWithoutTag) {
  absl::StatusOr<ExportSpec> spec = ParseExportOptions(
      Keyval("type=vhost-user-fs,id=v0,node-name=disk0,addr.type=unix,addr.path=/run/v.sock"),
      Syntax::kKeyval);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(std::get<exports::VhostUserFsExportOptions>(spec->options.transport).tag, "");
}

TEST(ExportSchemaTest, VhostUserFsErrors) {
  std::string base = "type=vhost-user-fs,id=v0,node-name=d,";
  EXPECT_EQ(ExportError(Keyval(base + "tag=t"), Syntax::kKeyval), "addr: missing (required)");
  EXPECT_EQ(ExportError(Keyval(base + "addr.type=inet,addr.path=/x,tag=t"), Syntax::kKeyval),
            "addr.type: 'inet' is not supported (bexd listens on unix only)");
  EXPECT_EQ(ExportError(Keyval(base + "addr.type=unix,tag=t"), Syntax::kKeyval),
            "addr.path: missing (required)");
  EXPECT_EQ(ExportError(Keyval(base + "addr.type=unix,addr.path=/s,tag=" + std::string(37, 't')),
                        Syntax::kKeyval),
            "tag: longer than 36 bytes");
  EXPECT_EQ(ExportError(Keyval(base + "addr.type=unix,addr.path=/s,tag=t,file-name=a/b"),
                        Syntax::kKeyval),
            "file-name: \"a/b\" is not a valid file name (one path component)");
  EXPECT_EQ(
      ExportError(Keyval(base + "addr.type=unix,addr.path=/" + std::string(120, 's') + ",tag=t"),
                  Syntax::kKeyval),
      "addr.path: '/" + std::string(120, 's') +
          "' is longer than 107 bytes, the limit for a unix socket");
}

TEST(ControlSchemaTest, ObjectChardevMonitor) {
  absl::StatusOr<IothreadObject> iothread =
      ParseIothreadObject(Keyval("iothread,id=t0", "qom-type"), Syntax::kKeyval);
  ASSERT_TRUE(iothread.ok()) << iothread.status();
  EXPECT_EQ(*iothread, IothreadObject{.id = "t0"});
  // QEMU's properties (libvirt sets poll-max-ns), kept for query-iothreads.
  iothread = ParseIothreadObject(
      Keyval("iothread,id=t1,poll-max-ns=0,poll-grow=2,poll-shrink=3,aio-max-batch=4,"
             "thread-pool-min=1,thread-pool-max=8",
             "qom-type"),
      Syntax::kKeyval);
  ASSERT_TRUE(iothread.ok()) << iothread.status();
  EXPECT_EQ(*iothread, (IothreadObject{.id = "t1",
                                       .poll_max_ns = 0,
                                       .poll_grow = 2,
                                       .poll_shrink = 3,
                                       .aio_max_batch = 4,
                                       .thread_pool_min = 1,
                                       .thread_pool_max = 8}));
  absl::StatusOr<ChardevSpec> chardev = ParseChardev(
      Keyval("socket,id=m0,path=/run/qmp.sock,server=on,wait=off", "backend"), Syntax::kKeyval);
  ASSERT_TRUE(chardev.ok()) << chardev.status();
  EXPECT_EQ(chardev->id, "m0");
  EXPECT_EQ(chardev->path, "/run/qmp.sock");
  absl::StatusOr<MonitorSpec> monitor =
      ParseMonitor(Keyval("m0,pretty=on", "chardev"), Syntax::kKeyval);
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  EXPECT_EQ(monitor->chardev, "m0");
  EXPECT_TRUE(monitor->pretty);
}

TEST(ControlSchemaTest, Errors) {
  auto object_error = [](std::string_view text) {
    absl::StatusOr<IothreadObject> iothread =
        ParseIothreadObject(Keyval(text, "qom-type"), Syntax::kKeyval);
    return iothread.ok() ? std::string() : std::string(iothread.status().message());
  };
  EXPECT_EQ(object_error("memory-backend-file,id=m"),
            "qom-type: 'memory-backend-file' is not supported (bexd knows iothread, secret)");
  EXPECT_EQ(object_error("iothread,id=t,poll-max-ns=-1"),
            "poll-max-ns: expected a non-negative integer, got \"-1\"");
  EXPECT_EQ(object_error("iothread,id=t,thread-pool-min=9,thread-pool-max=8"),
            "thread-pool-min: thread-pool-min must be smaller or equal to thread-pool-max");
  EXPECT_EQ(object_error("iothread,id=t,poll=1"),
            "poll: unknown option (known here: aio-max-batch, id, poll-grow, poll-max-ns, "
            "poll-shrink, qom-type, thread-pool-max, thread-pool-min)");
  auto chardev_error = [](std::string_view text) {
    absl::StatusOr<ChardevSpec> chardev = ParseChardev(Keyval(text, "backend"), Syntax::kKeyval);
    return chardev.ok() ? std::string() : std::string(chardev.status().message());
  };
  EXPECT_EQ(chardev_error("socket,id=m,path=/s,server=on,wait=on"),
            "wait: must be off (bexd does not wait for a client before starting)");
  EXPECT_EQ(chardev_error("socket,id=m,path=/s,server=off"),
            "server: must be on (bexd listens, never connects)");
  EXPECT_EQ(chardev_error("socket,id=m,host=localhost,port=4444,server=on"),
            "host: TCP sockets are not supported; give a unix socket with path= or fd=");
  EXPECT_EQ(chardev_error("file,id=m,path=/s"),
            "backend: 'file' is not supported (bexd knows socket, stdio)");
  EXPECT_EQ(chardev_error("socket,id=m,fd=3,path=/s,server=on"),
            "fd: give either path= or fd=, not both");
  EXPECT_EQ(chardev_error("stdio,id=m"), "");
  EXPECT_EQ(chardev_error("stdio,id=m,signal=off"), "");
  auto monitor_error = [](std::string_view text) {
    absl::StatusOr<MonitorSpec> monitor = ParseMonitor(Keyval(text, "chardev"), Syntax::kKeyval);
    return monitor.ok() ? std::string() : std::string(monitor.status().message());
  };
  EXPECT_EQ(monitor_error("chardev=m,path=/s"),
            "path: give exactly one of chardev=ID and path=SOCKET");
  EXPECT_EQ(monitor_error("m,mode=readline"),
            "mode: 'readline' is not supported (bexd speaks QMP: control)");
}

}  // namespace
}  // namespace bexd::cli
