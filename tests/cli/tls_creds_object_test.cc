// SPDX-License-Identifier: GPL-2.0-or-later
// --object tls-creds-x509 / tls-creds-psk as QEMU takes them, with the files a client needs
// checked when the object is created; what libnbd cannot do is refused with the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/config/daemon_config.h"
#include "cli/config/keyval.h"
#include "cli/config/tls_creds_object.h"
#include "tests/cli/bexd_process.h"
#include "tests/cli/keyval_json.h"

namespace bexd::cli {
namespace {

class TlsCredsObjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* sub : {"x509", "psk", "half"}) {
      std::filesystem::create_directories(dir_.path() + "/" + sub);
    }
    Write("x509/ca-cert.pem", "-----BEGIN CERTIFICATE-----\n");
    Write("half/ca-cert.pem", "-----BEGIN CERTIFICATE-----\n");
    Write("half/client-cert.pem", "-----BEGIN CERTIFICATE-----\n");
    Write("psk/keys.psk", "alice:0123456789abcdef\n");
  }
  void Write(const std::string& name, const std::string& contents) {
    std::ofstream(dir_.path() + "/" + name) << contents;
  }
  absl::StatusOr<TlsCredsObject> Parse(const std::string& keyval) {
    return ParseTlsCredsObject(Keyval(keyval, "qom-type"), Syntax::kKeyval);
  }
  std::string Error(const std::string& keyval) {
    absl::StatusOr<TlsCredsObject> creds = Parse(keyval);
    EXPECT_FALSE(creds.ok()) << keyval;
    return creds.ok() ? "" : std::string(creds.status().message());
  }
  std::string Dir(const std::string& sub) const { return dir_.path() + "/" + sub; }

  bexd::testing::TempDir dir_;
};

TEST_F(TlsCredsObjectTest, X509AndPskAsQemuWritesThem) {
  absl::StatusOr<TlsCredsObject> x509 =
      Parse("tls-creds-x509,id=tls0,dir=" + Dir("x509") + ",endpoint=client,verify-peer=on");
  ASSERT_TRUE(x509.ok()) << x509.status();
  EXPECT_EQ(x509->id, "tls0");
  EXPECT_EQ(x509->credentials, (block::TlsCredentials{.kind = block::TlsCredentials::Kind::kX509,
                                                      .dir = Dir("x509")}));
  absl::StatusOr<TlsCredsObject> psk =
      Parse("tls-creds-psk,id=k,dir=" + Dir("psk") + ",username=alice");
  ASSERT_TRUE(psk.ok()) << psk.status();
  EXPECT_EQ(psk->credentials.kind, block::TlsCredentials::Kind::kPsk);
  EXPECT_EQ(psk->credentials.username, "alice");
  // Without verify-peer no CA is needed; a server endpoint is checked only where it is used.
  EXPECT_TRUE(Parse("tls-creds-x509,id=t,dir=" + Dir("psk") + ",verify-peer=off").ok());
  absl::StatusOr<TlsCredsObject> server =
      Parse("tls-creds-x509,id=t,dir=" + Dir("psk") + ",endpoint=server");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE(server->credentials.client);
}

TEST_F(TlsCredsObjectTest, MissingFilesAndWhatLibnbdCannotDoAreRefused) {
  EXPECT_EQ(Error("tls-creds-x509,id=t"), "dir: missing (required)");
  EXPECT_EQ(Error("tls-creds-x509,id=t,dir=" + Dir("psk")),
            "dir: cannot read '" + Dir("psk") +
                "/ca-cert.pem' (the CA that signs the server's certificate; verify-peer=on): No "
                "such file or directory");
  EXPECT_EQ(Error("tls-creds-x509,id=t,dir=" + Dir("half")),
            "dir: '" + Dir("half") +
                "' holds client-cert.pem but not client-key.pem: a client certificate needs both");
  EXPECT_EQ(Error("tls-creds-psk,id=t,dir=" + Dir("psk")),
            "dir: '" + Dir("psk") +
                "/keys.psk' holds no key for username 'qemu' (lines username:hex-key)");
  EXPECT_EQ(Error("tls-creds-psk,id=t,dir=" + Dir("x509")),
            "dir: cannot read '" + Dir("x509") + "/keys.psk': No such file or directory");
  // Read with a bound, as a secret file is.
  std::filesystem::create_directory(Dir("endless"));
  std::filesystem::create_symlink("/dev/zero", Dir("endless") + "/keys.psk");
  EXPECT_EQ(Error("tls-creds-psk,id=t,dir=" + Dir("endless")),
            "dir: '" + Dir("endless") + "/keys.psk' is longer than 1048576 bytes");
  EXPECT_EQ(Error("tls-creds-anon,id=t,endpoint=client").substr(0, 52),
            "qom-type: anonymous TLS (tls-creds-anon) is not supp");
  EXPECT_EQ(Error("tls-creds-x509,id=t,dir=" + Dir("x509") + ",passwordid=sec0").substr(0, 55),
            "passwordid: encrypted private keys are not supported by");
  EXPECT_EQ(Error("tls-creds-x509,id=t,dir=" + Dir("x509") + ",priority=NORMAL").substr(0, 30),
            "priority: not supported by bex");
  EXPECT_EQ(Error("tls-creds-x509,id=t,dir=" + Dir("x509") + ",endpoint=peer"),
            "endpoint: expected one of client, server; got \"peer\"");
}

// Objects of every type share one namespace of ids, as QEMU's /objects.
TEST_F(TlsCredsObjectTest, IdsAreSharedWithTheOtherObjects) {
  DaemonConfig config;
  ASSERT_TRUE(config.AddObject(Keyval("iothread,id=x", "qom-type"), Syntax::kKeyval, "").ok());
  absl::Status status = config.AddObject(
      Keyval("tls-creds-x509,id=x,dir=" + Dir("x509"), "qom-type"), Syntax::kKeyval, "");
  EXPECT_EQ(status.message(), "id: 'x' is already used by another item of this kind");
  ASSERT_TRUE(config
                  .AddObject(Keyval("tls-creds-x509,id=t,dir=" + Dir("x509"), "qom-type"),
                             Syntax::kKeyval, "")
                  .ok());
  ASSERT_EQ(config.tls_creds.size(), 1u);
}

}  // namespace
}  // namespace bexd::cli
