// SPDX-License-Identifier: GPL-2.0-or-later
// --blockdev driver=rbd in QEMU's spellings (keyval as QSD takes it, JSON as QMP sends it) and
// --object secret, QEMU's secret object that key-secret names.
#include <gtest/gtest.h>

#include <absl/strings/escaping.h>

#include <filesystem>
#include <fstream>

#include "cli/config/blockdev_schema.h"
#include "cli/config/daemon_config.h"
#include "cli/config/json_text.h"
#include "cli/config/keyval.h"
#include "cli/config/secret_object.h"
#include "tests/cli/bexd_process.h"
#include "tests/cli/keyval_json.h"

namespace bexd::cli {
namespace {

using nlohmann::json;

json Json(std::string_view text) {
  absl::StatusOr<json> parsed = ParseJsonText(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : json::object();
}

std::string BlockdevError(const json& object, Syntax syntax) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(object, syntax);
  EXPECT_FALSE(options.ok()) << object.dump();
  return options.ok() ? "" : std::string(options.status().message());
}

TEST(RbdOptionsTest, KeyvalAsQsdTakesIt) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
      Keyval("rbd,node-name=r0,pool=vms,namespace=tenant1,image=disk1,snapshot=s1,"
             "conf=ceph.conf,user=bexd,key-secret=key0,auth-client-required.0=cephx,"
             "auth-client-required.1=none,server.0.host=10.0.0.1,server.0.port=6789,"
             "server.1.host=fd00::2,server.1.port=3300,read-only=on,cache.direct=on,"
             "cache.no-flush=on,discard=unmap",
             "driver"),
      Syntax::kKeyval);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->read_only);
  const auto& rbd = std::get<block::RbdOptions>(options->driver);
  EXPECT_EQ(rbd.pool, "vms");
  EXPECT_EQ(rbd.name_space, "tenant1");
  EXPECT_EQ(rbd.image, "disk1");
  EXPECT_EQ(rbd.snapshot, "s1");
  EXPECT_EQ(rbd.conf, std::filesystem::current_path().string() + "/ceph.conf");
  EXPECT_EQ(rbd.user, "bexd");
  EXPECT_EQ(rbd.key_secret, "key0");
  EXPECT_EQ(rbd.auth_client_required,
            (std::vector{block::RbdAuthMode::kCephx, block::RbdAuthMode::kNone}));
  EXPECT_EQ(rbd.server,
            (std::vector<block::InetAddress>{{"10.0.0.1", "6789"}, {"fd00::2", "3300"}}));
  EXPECT_TRUE(rbd.cache_no_flush);
  EXPECT_EQ(rbd.discard, block::DiscardMode::kUnmap);
}

TEST(RbdOptionsTest, JsonMatchesKeyvalAndDefaults) {
  absl::StatusOr<block::BlockdevOptions> json_options = ParseBlockdevOptions(
      Json(R"({"driver": "rbd", "node-name": "r0", "pool": "rbd", "image": "img",
               "server": [{"host": "mon1", "port": "3300"}],
               "auth-client-required": ["cephx"]})"),
      Syntax::kJson);
  ASSERT_TRUE(json_options.ok()) << json_options.status();
  absl::StatusOr<block::BlockdevOptions> keyval_options = ParseBlockdevOptions(
      Keyval("driver=rbd,node-name=r0,pool=rbd,image=img,server.0.host=mon1,server.0.port=3300,"
             "auth-client-required=cephx"),
      Syntax::kKeyval);
  ASSERT_TRUE(keyval_options.ok()) << keyval_options.status();
  EXPECT_EQ(*json_options, *keyval_options);
  const auto& rbd = std::get<block::RbdOptions>(json_options->driver);
  EXPECT_EQ(rbd.name_space, "");
  EXPECT_FALSE(rbd.snapshot || rbd.conf || rbd.user || rbd.key_secret);
  EXPECT_EQ(rbd.discard, block::DiscardMode::kIgnore);
}

TEST(RbdOptionsTest, ErrorsNameTheKey) {
  EXPECT_EQ(BlockdevError(Keyval("driver=rbd,node-name=r0,image=img"), Syntax::kKeyval),
            "pool: missing (required)");
  EXPECT_EQ(BlockdevError(Keyval("driver=rbd,node-name=r0,pool=rbd"), Syntax::kKeyval),
            "image: missing (required)");
  EXPECT_EQ(BlockdevError(Keyval("driver=rbd,node-name=r0,pool=rbd,image=i,"
                                 "auth-client-required.0=kerberos"),
                          Syntax::kKeyval),
            "auth-client-required: expected a list of cephx and none; got \"kerberos\"");
  EXPECT_EQ(BlockdevError(Keyval("driver=rbd,node-name=r0,pool=rbd,image=i,server=mon1"),
                          Syntax::kKeyval),
            "server: expected a list of {host, port} objects");
  EXPECT_EQ(BlockdevError(Keyval("driver=rbd,node-name=r0,pool=rbd,image=i,server.0.host=mon1"),
                          Syntax::kKeyval),
            "server[0].port: missing (required)");
  // QEMU's port is a string, also in JSON.
  EXPECT_EQ(BlockdevError(Json(R"({"driver": "rbd", "node-name": "r0", "pool": "rbd",
                                   "image": "i", "server": [{"host": "m", "port": 6789}]})"),
                          Syntax::kJson),
            "server[0].port: expected a string, got 6789");
  EXPECT_EQ(BlockdevError(Keyval("driver=rbd,node-name=r0,pool=rbd,image=i,server.0.host=m,"
                                 "server.0.port=1,server.0.type=inet"),
                          Syntax::kKeyval),
            "server[0].type: unknown option (known here: host, port)");
  EXPECT_EQ(BlockdevError(Keyval("driver=rbd,node-name=r0,pool=rbd,image=i,encrypt.format=luks"),
                          Syntax::kKeyval),
            "encrypt: LUKS encryption of rbd images is not supported by bexd");
  EXPECT_EQ(
      BlockdevError(Keyval("driver=rbd,node-name=r0,pool=rbd,image=i,key=AQBx"), Syntax::kKeyval)
          .substr(0, 22),
      "key: unknown option (k");
}

class SecretObjectTest : public ::testing::Test {
 protected:
  std::string File(const std::string& name, const std::string& contents) {
    std::string path = dir_.path() + "/" + name;
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }
  static std::string Error(const std::string& keyval) {
    absl::StatusOr<SecretObject> secret =
        ParseSecretObject(Keyval(keyval, "qom-type"), Syntax::kKeyval);
    EXPECT_FALSE(secret.ok());
    return secret.ok() ? "" : std::string(secret.status().message());
  }

  bexd::testing::TempDir dir_;
};

TEST_F(SecretObjectTest, FileAndDataInRawAndBase64) {
  // A key as `ceph auth get-key` prints it, with the newline `echo` adds.
  const std::string key = "AQBnd1BnAAAAABAAyH4RQv3lSbTw9f3Q0m0i6A==";
  std::string key_bytes;
  ASSERT_TRUE(absl::Base64Unescape(key, &key_bytes));
  absl::StatusOr<SecretObject> secret = ParseSecretObject(
      Keyval("secret,id=key0,format=base64,file=" + File("key", key + "\n"), "qom-type"),
      Syntax::kKeyval);
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ(secret->id, "key0");
  EXPECT_EQ(secret->value, key_bytes);

  // raw (the default) is byte for byte, the newline included, as QEMU reads it.
  secret = ParseSecretObject(Keyval("secret,id=p,file=" + File("pass", "hunter2\n"), "qom-type"),
                             Syntax::kKeyval);
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ(secret->value, "hunter2\n");
  secret = ParseSecretObject(Keyval("secret,id=d,data=" + key + ",format=base64", "qom-type"),
                             Syntax::kKeyval);
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ(secret->value, key_bytes);
  secret =
      ParseSecretObject(Json(R"({"qom-type": "secret", "id": "j", "data": "abc"})"), Syntax::kJson);
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ(secret->value, "abc");
}

TEST_F(SecretObjectTest, Errors) {
  EXPECT_EQ(Error("secret,id=k"), "data: either 'data' or 'file' must be given");
  EXPECT_EQ(Error("secret,id=k,data=a,file=/x"), "file: 'data' and 'file' are mutually exclusive");
  EXPECT_EQ(Error("secret,id=k,file=" + dir_.path() + "/missing"),
            "file: cannot read '" + dir_.path() + "/missing': No such file or directory");
  // Read with a bound: /dev/zero once filled the memory until std::bad_alloc ended the daemon.
  EXPECT_EQ(Error("secret,id=k,file=/dev/zero"), "file: '/dev/zero' is longer than 1048576 bytes");
  EXPECT_EQ(Error("secret,id=k,data=not*base64,format=base64"),
            "data: format=base64, but this is not base64 text");
  EXPECT_EQ(Error("secret,id=k,data=abc,format=hex"),
            "format: expected one of raw, base64; got \"hex\"");
  EXPECT_EQ(Error("secret,id=k,data=abc,keyid=master0,iv=AAAA"),
            "keyid: encrypted secrets are not supported by bexd; give the secret in a file only "
            "bexd's user can read (file=)");
  EXPECT_EQ(Error("secret,id=1k,data=a").substr(0, 4), "id: ");

  // Objects of every type share one namespace of ids.
  DaemonConfig config;
  ASSERT_TRUE(config.AddObject(Keyval("iothread,id=t0", "qom-type"), Syntax::kKeyval, "").ok());
  ASSERT_TRUE(
      config.AddObject(Keyval("secret,id=s0,data=x", "qom-type"), Syntax::kKeyval, "").ok());
  EXPECT_EQ(
      config.AddObject(Keyval("secret,id=t0,data=x", "qom-type"), Syntax::kKeyval, "").message(),
      "id: 't0' is already used by another item of this kind");
  EXPECT_EQ(config.AddObject(Keyval("iothread,id=s0", "qom-type"), Syntax::kKeyval, "").message(),
            "id: 's0' is already used by another item of this kind");
  ASSERT_EQ(config.secrets.size(), 1u);
  EXPECT_EQ(config.secrets[0].value, "x");
}

}  // namespace
}  // namespace bexd::cli
