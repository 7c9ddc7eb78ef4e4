// SPDX-License-Identifier: GPL-2.0-or-later
// QMP input that QEMU's JSON parser bounds or accepts: nesting depth, request size, and
// single-quoted strings, against a real bexd. A refused request gets a GenericError and the
// connection stays usable; the FUSE export keeps serving.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "tests/control/control_fixture.h"
#include "tests/support/process_stats.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

const char kDepthError[] = "JSON nesting depth limit exceeded (at most 1024 levels)";

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

class QmpJsonLimitsTest : public ControlTest {
 protected:
  // The export still serves reads.
  void ExpectExportServes() {
    int fd = ::open(mountpoint_.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    char buffer[4096];
    EXPECT_EQ(::pread(fd, buffer, sizeof(buffer), 0), static_cast<ssize_t>(sizeof(buffer)));
    ::close(fd);
  }

  // Starts the daemon with a second monitor, pretty=on, and a negotiated client on it.
  std::unique_ptr<QmpClient> StartWithPrettyMonitor() {
    const std::string pretty_socket = Path("pretty.sock");
    StartDaemon({"--monitor", "path=" + pretty_socket + ",pretty=on"});
    auto client = std::make_unique<QmpClient>(pretty_socket);
    EXPECT_TRUE(client->connected());
    client->Negotiate();
    return client;
  }
};

// 60,000 levels in the id crashed bexd (recursion echoing the id) and left the mount dead.
TEST_F(QmpJsonLimitsTest, DeepNestingIsRefusedAndTheConnectionStays) {
  StartDaemon();
  auto client = Connect();
  ASSERT_TRUE(client->ReadMessage().has_value());  // greeting; no negotiation needed
  client->SendRaw(R"({"execute": "query-version", "id": )" + Nested(60000) + "}");
  json reply = client->ReadReply();
  EXPECT_EQ(ErrorClass(reply), "GenericError") << reply;
  EXPECT_EQ(ErrorDesc(reply), kDepthError);
  EXPECT_FALSE(reply.contains("id"));

  client->SendRaw(R"({"execute": "qmp_capabilities", "id": "next"})");
  EXPECT_EQ(client->ReadReply(), json({{"return", json::object()}, {"id", "next"}}));
  EXPECT_EQ(client->Execute("query-block-exports")["return"].size(), 1u);
  ASSERT_TRUE(daemon_->running());
  ExpectExportServes();
}

// QEMU counts objects and arrays together, the request's own object included: 1024 pass.
TEST_F(QmpJsonLimitsTest, NestingLimitIsQemus) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  const std::string deepest = Nested(1023);
  client->SendRaw(R"({"execute": "query-version", "id": )" + deepest + "}");
  json reply = client->ReadReply();
  EXPECT_EQ(Success(reply), "");
  EXPECT_EQ(reply["id"], json::parse(deepest));

  client->SendRaw(R"({"execute": "query-version", "id": {"a": )" + deepest + "}}");
  EXPECT_EQ(ErrorDesc(client->ReadReply()), kDepthError);
  client->SendRaw(R"({"execute": "query-version", "id": 7})");
  EXPECT_EQ(client->ReadReply()["id"], 7);
}

// With pretty=on, 10,000 levels took 790 MB and blocked the main loop for seconds.
TEST_F(QmpJsonLimitsTest, DeepNestingOnAPrettyMonitor) {
  auto client = StartWithPrettyMonitor();
  client->SendRaw(R"({"execute": "query-version", "id": )" + Nested(10000) + "}");
  json reply = client->ReadReply();
  EXPECT_EQ(ErrorDesc(reply), kDepthError) << reply;
  EXPECT_LT(StatusKb(daemon_->pid(), "VmHWM"), 128 << 10);
  EXPECT_EQ(Success(client->Execute("query-version")), "");
}

// Nesting within the limit, wide at the bottom: indented, each element would cost 4 KB.
TEST_F(QmpJsonLimitsTest, PrettyRepliesDoNotMultiplyDeepIds) {
  auto client = StartWithPrettyMonitor();
  std::string id = std::string(1000, '[');
  for (int i = 0; i < 40000; ++i) id += "0,";
  id += "0" + std::string(1000, ']');
  client->SendRaw(R"({"execute": "query-version", "id": )" + id + "}");
  json reply = client->ReadReply();
  EXPECT_EQ(Success(reply), "");
  EXPECT_EQ(reply["id"], json::parse(id));
  EXPECT_LT(StatusKb(daemon_->pid(), "VmHWM"), 128 << 10);
}

// iotests send QMP with single quotes, which QEMU's parser accepts, with its escapes.
TEST_F(QmpJsonLimitsTest, SingleQuotedStrings) {
  StartDaemon();
  auto client = Connect();
  ASSERT_TRUE(client->ReadMessage().has_value());
  client->SendRaw(R"({'execute': 'qmp_capabilities'})");
  EXPECT_EQ(Success(client->ReadReply()), "");
  client->SendRaw(R"({'execute': 'query-version', 'id': 'it\'s "quoted" \\ {['})");
  json reply = client->ReadReply();
  EXPECT_EQ(Success(reply), "");
  EXPECT_EQ(reply["id"], "it's \"quoted\" \\ {[");
  client->SendRaw(R"({"execute": "query-version", "id": ["it\'s", 'a\u00e9\/']})");
  EXPECT_EQ(client->ReadReply()["id"], json({"it's", "aé/"}));
  client->SendRaw(R"({'execute': 'blockdev-add',
                      'arguments': {'driver': 'null-co', 'node-name': 'null0', 'size': 1048576}})");
  EXPECT_EQ(Success(client->ReadReply()), "");
  EXPECT_EQ(client->Execute("query-named-block-nodes")["return"][0]["node-name"], "null0");
  // An escape QEMU does not know stays an error.
  client->SendRaw(R"({'execute': 'query-version', 'id': '\x'})");
  EXPECT_EQ(ErrorClass(client->ReadReply()), "GenericError");
}

}  // namespace
}  // namespace bexd::testing
