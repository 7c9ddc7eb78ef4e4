// SPDX-License-Identifier: GPL-2.0-or-later
// What a QMP client sees byte for byte, compared with what QEMU's storage daemon sends: the
// formatting scripts grep for, the greeting, and the events at the end.
#include <gtest/gtest.h>

#include "tests/control/control_fixture.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

const std::string kGreeting =
    R"({"QMP": {"version": {"qemu": {"micro": 0, "minor": 1, "major": 10}, "package": "bexd )" BEXD_VERSION
    R"("}, "capabilities": []}})"
    "\r\n";

TEST_F(ControlTest, RepliesAreFormattedAsQemuFormatsThem) {
  StartDaemon();
  auto client = Connect();
  EXPECT_EQ(client->ReadRawMessage(), kGreeting);
  client->SendRaw(R"({"execute": "qmp_capabilities"})");
  EXPECT_EQ(client->ReadRawMessage(), "{\"return\": {}}\r\n");
  client->SendRaw(R"({"execute": "query-block-exports", "id": "q1"})");
  EXPECT_EQ(client->ReadRawMessage(),
            R"({"return": [{"node-name": "disk0", "shutting-down": false, "type": "fuse", )"
            R"("id": "exp0"}], "id": "q1"})"
            "\r\n");
  client->SendRaw(R"({"execute": "no-such-command", "id": ["x", 1]})");
  EXPECT_EQ(client->ReadRawMessage(),
            R"({"id": ["x", 1], "error": {"class": "CommandNotFound", )"
            R"("desc": "The command no-such-command has not been found"}})"
            "\r\n");
  // Everything outside printable ASCII is escaped as QEMU does, in upper-case hex.
  client->SendRaw(
      "{\"execute\": \"qmp_capabilities\", \"id\": \"\xc3\xa9\\u0001\xf0\x9f\x98\x80\"}");
  EXPECT_EQ(client->ReadRawMessage(),
            R"({"id": "\u00E9\u0001\uD83D\uDE00", "error": {"class": "CommandNotFound", )"
            R"("desc": "Capabilities negotiation is already complete, command ignored"}})"
            "\r\n");
}

TEST_F(ControlTest, PrettyOutputIsQemus) {
  StartDaemon({"--chardev", "socket,id=m1,path=" + Path("pretty.sock") + ",server=on,wait=off",
               "--monitor", "chardev=m1,pretty=on"});
  QmpClient pretty(Path("pretty.sock"));
  ASSERT_TRUE(pretty.connected());
  EXPECT_EQ(pretty.ReadRawMessage(),
            "{\r\n"
            "    \"QMP\": {\r\n"
            "        \"version\": {\r\n"
            "            \"qemu\": {\r\n"
            "                \"micro\": 0,\r\n"
            "                \"minor\": 1,\r\n"
            "                \"major\": 10\r\n"
            "            },\r\n"
            "            \"package\": \"bexd " BEXD_VERSION
            "\"\r\n"
            "        },\r\n"
            "        \"capabilities\": [\r\n"
            "        ]\r\n"
            "    }\r\n"
            "}\r\n");
  pretty.SendRaw(R"({"execute": "qmp_capabilities"})");
  EXPECT_EQ(pretty.ReadRawMessage(), "{\r\n    \"return\": {\r\n    }\r\n}\r\n");
  pretty.SendRaw(R"({"execute": "query-block-exports"})");
  EXPECT_EQ(pretty.ReadRawMessage(),
            "{\r\n"
            "    \"return\": [\r\n"
            "        {\r\n"
            "            \"node-name\": \"disk0\",\r\n"
            "            \"shutting-down\": false,\r\n"
            "            \"type\": \"fuse\",\r\n"
            "            \"id\": \"exp0\"\r\n"
            "        }\r\n"
            "    ]\r\n"
            "}\r\n");
}

// iotest 308's tear-down: SHUTDOWN, BLOCK_EXPORT_DELETED for each export, then quit's reply.
TEST_F(ControlTest, QuitAnnouncesShutdownAndEveryExportBeforeItsReply) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  ASSERT_EQ(Success(client->Execute("blockdev-add", NullNode("null0"))), "");
  ASSERT_EQ(
      Success(client->Execute("block-export-add", FuseExport("exp1", "null0", dir_.File("null0")))),
      "");
  auto watcher = Connect();
  watcher->Negotiate();
  client->SendRaw(R"({"execute": "quit"})");
  std::vector<json> messages;
  for (int i = 0; i < 4; ++i) {
    std::optional<json> message = client->ReadMessage();
    ASSERT_TRUE(message.has_value()) << i;
    messages.push_back(*message);
  }
  EXPECT_EQ(messages[0]["event"], "SHUTDOWN");
  EXPECT_EQ(messages[0]["data"], json({{"guest", false}, {"reason", "host-qmp-quit"}}));
  EXPECT_TRUE(messages[0]["timestamp"]["seconds"].is_number());
  // Newest first, as QSD closes them.
  EXPECT_EQ(messages[1]["event"], "BLOCK_EXPORT_DELETED");
  EXPECT_EQ(messages[1]["data"], json({{"id", "exp1"}}));
  EXPECT_EQ(messages[2]["event"], "BLOCK_EXPORT_DELETED");
  EXPECT_EQ(messages[2]["data"], json({{"id", "exp0"}}));
  EXPECT_EQ(messages[3], json({{"return", json::object()}}));
  // The other client gets the events too.
  EXPECT_TRUE(watcher->WaitEvent("SHUTDOWN").has_value());
  EXPECT_TRUE(watcher->WaitEvent("BLOCK_EXPORT_DELETED").has_value());
  EXPECT_EQ(daemon_->Wait(), 0);
  EXPECT_FALSE(IsMounted(dir_.path() + "/null0"));
}

// block-export-del and quit in one write: the deleted export's event comes before the shutdown's.
TEST_F(ControlTest, AnExportDeletedJustBeforeQuitIsAnnouncedBeforeTheShutdown) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  ASSERT_EQ(Success(client->Execute("blockdev-add", NullNode("null0"))), "");
  ASSERT_EQ(
      Success(client->Execute("block-export-add", FuseExport("exp1", "null0", dir_.File("null0")))),
      "");
  client->SendRaw(R"({"execute": "block-export-del", "arguments": {"id": "exp1"}})"
                  "\n"
                  R"({"execute": "quit"})");
  std::vector<json> messages;
  for (int i = 0; i < 5; ++i) {
    std::optional<json> message = client->ReadMessage();
    ASSERT_TRUE(message.has_value()) << i;
    messages.push_back(*message);
  }
  EXPECT_EQ(messages[0], json({{"return", json::object()}}));
  EXPECT_EQ(messages[1]["event"], "BLOCK_EXPORT_DELETED");
  EXPECT_EQ(messages[1]["data"], json({{"id", "exp1"}}));
  EXPECT_EQ(messages[2]["event"], "SHUTDOWN");
  EXPECT_EQ(messages[3]["event"], "BLOCK_EXPORT_DELETED");
  EXPECT_EQ(messages[3]["data"], json({{"id", "exp0"}}));
  EXPECT_EQ(messages[4], json({{"return", json::object()}}));
  EXPECT_EQ(daemon_->Wait(), 0);
}

TEST_F(ControlTest, SignalsAnnounceShutdownAndEveryExport) {
  for (int signal : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(signal);
    StartDaemon();
    auto client = Connect();
    client->Negotiate();
    ASSERT_EQ(daemon_->Stop(signal), 0) << ReadFile(log_);
    std::optional<json> shutdown = client->ReadMessage();
    ASSERT_TRUE(shutdown.has_value());
    EXPECT_EQ((*shutdown)["event"], "SHUTDOWN");
    EXPECT_EQ((*shutdown)["data"], json({{"guest", false}, {"reason", "host-signal"}}));
    std::optional<json> deleted = client->ReadMessage();
    ASSERT_TRUE(deleted.has_value());
    EXPECT_EQ((*deleted)["event"], "BLOCK_EXPORT_DELETED");
    EXPECT_EQ((*deleted)["data"], json({{"id", "exp0"}}));
    EXPECT_TRUE(client->WaitClosed());
    EXPECT_FALSE(IsMounted(mountpoint_));
  }
}

}  // namespace
}  // namespace bexd::testing
