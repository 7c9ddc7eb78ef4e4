// SPDX-License-Identifier: GPL-2.0-or-later
// The nbd driver over TLS (QEMU's tls-creds): nbdkit with --tls=require, certificates made here
// with openssl (a CA, the server's for localhost and 127.0.0.1, a client's), or a pre-shared key.
// Data written through the node is read back from the server's file; refusals are checked by
// their messages: a server without TLS, a certificate no trusted CA signed, a name the
// certificate does not carry, a server that wants TLS from a node without it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "block/objects.h"
#include "block/open.h"
#include "tests/block/queue_runner.h"
#include "tests/support/nbd_server.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/tls_certificates.h"

namespace bexd::block::testing {
namespace {

using bexd::testing::HaveProgram;
using bexd::testing::MakeTlsCertificates;
using bexd::testing::NbdServer;
using bexd::testing::ScratchDir;

constexpr uint64_t kSize = 4 << 20;

// A TCP port nothing listens on now (the kernel's choice for port 0).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

class NbdTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveProgram("nbdkit") || !HaveProgram("openssl")) {
      GTEST_SKIP() << "nbdkit or openssl is missing";
    }
    image_ = scratch_.CreateFile("disk.img", kSize);
    port_ = FreePort();
    ASSERT_GT(port_, 0);
    for (const char* pki : {"pki", "other-pki"}) {
      const std::string failed = MakeTlsCertificates(Dir(pki), "localhost");
      ASSERT_TRUE(failed.empty()) << failed;
    }
  }
  void TearDown() override {
    for (const std::string& id : ids_) RemoveObject(id);
  }

  std::string Dir(const std::string& path) const { return scratch_.path() + "/" + path; }

  bool StartServer(const std::vector<std::string>& tls) {
    std::vector<std::string> command = {
        "nbdkit", "-f", "-i", "127.0.0.1", "-p", std::to_string(port_), "-P", Dir("server.pid")};
    command.insert(command.end(), tls.begin(), tls.end());
    command.insert(command.end(), {"file", image_});
    server_ = std::make_unique<NbdServer>(command, Dir("server.pid"), Dir("server.log"));
    const bool started = server_->Start();
    EXPECT_TRUE(started) << server_->why_not();
    return started;
  }

  // Credentials under `id`, removed again at the end.
  void AddCredentials(const std::string& id, TlsCredentials credentials) {
    ASSERT_TRUE(AddTlsCredentials(id, std::move(credentials)).ok());
    ids_.push_back(id);
  }

  NbdOptions Options(const std::string& host, const std::string& tls_creds) const {
    NbdOptions options;
    options.transport = NbdOptions::Transport::kInet;
    options.host = host;
    options.port = std::to_string(port_);
    options.tls_creds = tls_creds;
    return options;
  }

  absl::StatusOr<std::shared_ptr<BlockNode>> Open(const NbdOptions& options) {
    BlockdevOptions blockdev;
    blockdev.node_name = "nbd0";
    blockdev.driver = options;
    return OpenBlockNode(blockdev);
  }

  // Writes through the node and finds the bytes in the server's file.
  void ExpectDataReachesTheServer(BlockNode& node) {
    absl::StatusOr<std::unique_ptr<IoQueue>> queue = node.CreateQueue();
    ASSERT_TRUE(queue.ok()) << queue.status();
    std::vector<unsigned char> data = Pattern(3 * 65536 + 512, 21);
    ASSERT_EQ(WriteAt(**queue, data.data(), data.size(), 4096), int64_t(data.size()));
    ASSERT_EQ(RunOne(**queue, IoOp::kFlush, 0, 0), 0);
    std::vector<unsigned char> back(data.size());
    ASSERT_EQ(ReadAt(**queue, back.data(), back.size(), 4096), int64_t(back.size()));
    EXPECT_EQ(back, data);
    std::ifstream file(image_, std::ios::binary);
    file.seekg(4096);
    std::vector<unsigned char> stored(data.size());
    file.read(reinterpret_cast<char*>(stored.data()), static_cast<std::streamsize>(stored.size()));
    EXPECT_EQ(stored, data);
  }

  ScratchDir scratch_{"nbd-tls"};
  std::string image_;
  int port_ = -1;
  std::unique_ptr<NbdServer> server_;
  std::vector<std::string> ids_;
};

TEST_F(NbdTlsTest, X509CertificatesCarryTheData) {
  ASSERT_TRUE(StartServer({"--tls=require", "--tls-certificates=" + Dir("pki/server")}));
  AddCredentials("tls-x509", {.kind = TlsCredentials::Kind::kX509, .dir = Dir("pki/client")});
  absl::StatusOr<std::shared_ptr<BlockNode>> node = Open(Options("localhost", "tls-x509"));
  ASSERT_TRUE(node.ok()) << node.status();
  ExpectDataReachesTheServer(**node);
}

// nbdkit --tls-verify-peer wants the client's certificate, which the credentials' directory has.
TEST_F(NbdTlsTest, AServerThatChecksClientsGetsTheClientCertificate) {
  ASSERT_TRUE(StartServer(
      {"--tls=require", "--tls-certificates=" + Dir("pki/server"), "--tls-verify-peer"}));
  AddCredentials("tls-client", {.kind = TlsCredentials::Kind::kX509, .dir = Dir("pki/client")});
  absl::StatusOr<std::shared_ptr<BlockNode>> node = Open(Options("127.0.0.1", "tls-client"));
  ASSERT_TRUE(node.ok()) << node.status();
  ExpectDataReachesTheServer(**node);
}

TEST_F(NbdTlsTest, APreSharedKeyCarriesTheData) {
  ASSERT_EQ(::system(("mkdir -p " + Dir("psk") + " && printf 'alice:%s\\n' " +
                      "0123456789abcdef0123456789abcdef > " + Dir("psk/keys.psk"))
                         .c_str()),
            0);
  ASSERT_TRUE(StartServer({"--tls=require", "--tls-psk=" + Dir("psk/keys.psk")}));
  AddCredentials("tls-psk",
                 {.kind = TlsCredentials::Kind::kPsk, .dir = Dir("psk"), .username = "alice"});
  absl::StatusOr<std::shared_ptr<BlockNode>> node = Open(Options("127.0.0.1", "tls-psk"));
  ASSERT_TRUE(node.ok()) << node.status();
  ExpectDataReachesTheServer(**node);
}

// Each refusal is a failed open with the reason; nothing is served without the checks passing.
TEST_F(NbdTlsTest, ServersThatCannotBeTrustedAreRefused) {
  ASSERT_TRUE(StartServer({"--tls=require", "--tls-certificates=" + Dir("pki/server")}));
  // Without tls-creds the server refuses the node (it wants TLS first).
  absl::StatusOr<std::shared_ptr<BlockNode>> node = Open(Options("localhost", ""));
  EXPECT_FALSE(node.ok());
  // A CA that did not sign the server's certificate.
  AddCredentials("tls-other",
                 {.kind = TlsCredentials::Kind::kX509, .dir = Dir("other-pki/client")});
  node = Open(Options("localhost", "tls-other"));
  ASSERT_FALSE(node.ok());
  EXPECT_NE(node.status().message().find("cannot connect to NBD server localhost:"),
            std::string::npos)
      << node.status();
  // A name the certificate does not carry.
  AddCredentials("tls-good", {.kind = TlsCredentials::Kind::kX509, .dir = Dir("pki/client")});
  NbdOptions options = Options("127.0.0.1", "tls-good");
  options.tls_hostname = "nbd.example";
  node = Open(options);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().message(),
            "node 'nbd0': tls-creds 'tls-good': tls-hostname 'nbd.example': libnbd checks the "
            "server's certificate for the name it connects to, server.host '127.0.0.1'; connect "
            "to 'nbd.example' instead");
  // Unknown credentials, and credentials for the other end.
  node = Open(Options("localhost", "missing"));
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().message(),
            "node 'nbd0': tls-creds 'missing': No TLS credentials with id 'missing'");
  AddCredentials("tls-server",
                 {.kind = TlsCredentials::Kind::kX509, .dir = Dir("pki/server"), .client = false});
  node = Open(Options("localhost", "tls-server"));
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().message(),
            "node 'nbd0': tls-creds 'tls-server': Expecting TLS credentials with a client "
            "endpoint");
  // The right credentials still work against the same server.
  node = Open(Options("localhost", "tls-good"));
  EXPECT_TRUE(node.ok()) << node.status();
}

// tls-creds on a server that offers no TLS: refused, as QEMU requires TLS once it is asked for.
TEST_F(NbdTlsTest, AServerWithoutTlsIsRefused) {
  ASSERT_TRUE(StartServer({}));
  AddCredentials("tls-plain", {.kind = TlsCredentials::Kind::kX509, .dir = Dir("pki/client")});
  absl::StatusOr<std::shared_ptr<BlockNode>> node = Open(Options("localhost", "tls-plain"));
  EXPECT_FALSE(node.ok());
}

}  // namespace
}  // namespace bexd::block::testing
