// SPDX-License-Identifier: GPL-2.0-or-later
// The QMP wire protocol of a real bexd: greeting, capabilities negotiation, request framing, and
// survival of bad clients.
#include <gtest/gtest.h>

#include "tests/control/control_fixture.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

TEST_F(ControlTest, GreetingAndNegotiation) {
  StartDaemon();
  auto client = Connect();
  std::optional<json> greeting = client->ReadMessage();
  ASSERT_TRUE(greeting.has_value());
  EXPECT_EQ((*greeting)["QMP"]["capabilities"], json::array());
  EXPECT_TRUE((*greeting)["QMP"]["version"]["qemu"]["major"].is_number());
  EXPECT_EQ((*greeting)["QMP"]["version"]["package"], "bexd " BEXD_VERSION);

  json reply = client->Execute("query-block-exports");
  EXPECT_EQ(ErrorClass(reply), "CommandNotFound");
  EXPECT_EQ(ErrorDesc(reply), "Expecting capabilities negotiation with 'qmp_capabilities'");

  client->SendRaw(R"({"execute": "qmp_capabilities", "arguments": {"enable": ["oob"]}})");
  EXPECT_EQ(ErrorDesc(client->ReadReply()), "capability 'oob' is not available");
  client->SendRaw(R"({"execute": "qmp_capabilities", "arguments": {"enable": "oob"}})");
  EXPECT_EQ(ErrorDesc(client->ReadReply()), "Invalid parameter type for 'enable', expected: array");
  client->SendRaw(R"({"execute": "qmp_capabilities", "arguments": {"enable": [1]}})");
  EXPECT_EQ(ErrorDesc(client->ReadReply()),
            "Invalid parameter type for 'enable[0]', expected: string");

  // An empty list, as a client that passes on the greeting's capabilities sends it.
  client->SendRaw(
      R"({"execute": "qmp_capabilities", "arguments": {"enable": []}, "id": "negotiate-1"})");
  EXPECT_EQ(client->ReadReply(), json({{"return", json::object()}, {"id", "negotiate-1"}}));

  client->SendRaw(R"({"execute": "qmp_capabilities", "id": 2})");
  reply = client->ReadReply();
  EXPECT_EQ(ErrorClass(reply), "CommandNotFound");
  EXPECT_EQ(reply["id"], 2);

  client->SendRaw(R"({"execute": "query-block-exports", "id": {"any": ["json"]}})");
  reply = client->ReadReply();
  EXPECT_EQ(reply["id"], json({{"any", {"json"}}}));
  EXPECT_EQ(reply["return"], json::parse(R"([{"type": "fuse", "id": "exp0", "node-name": "disk0",
                                               "shutting-down": false}])"));
}

TEST_F(ControlTest, MalformedRequestsGetErrorsAndTheClientStays) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  struct Case {
    std::string request;
    std::string error_class;
    std::string desc;
  } cases[] = {
      {"[1, 2]", "GenericError", "QMP input must be a JSON object"},
      {"42\n", "GenericError", "QMP input must be a JSON object"},
      {R"({"arguments": {}})", "GenericError", "QMP input lacks member 'execute'"},
      {R"({"execute": 7})", "GenericError", "QMP input member 'execute' must be a string"},
      {R"({"execute": "quit", "arguments": []})", "GenericError",
       "QMP input member 'arguments' must be an object"},
      {R"({"execute": "quit", "extra": 1})", "GenericError",
       "QMP input member 'extra' is unexpected"},
      {R"({"execute": "no-such-command"})", "CommandNotFound",
       "The command no-such-command has not been found"},
      {R"({"execute": "query-block-exports", "arguments": {"x": 1}})", "GenericError",
       "x: unknown option"},
      {"not-json\n", "GenericError", ""},
      {"{\"execute\": \"\xff\xfe\"}", "GenericError", ""},
      {"{\"execute\": \"query-version\", \"id\": \"\xc3\x28\"}", "GenericError", ""},
  };
  for (const Case& c : cases) {
    client->SendRaw(c.request);
    json reply = client->ReadReply();
    EXPECT_EQ(ErrorClass(reply), c.error_class) << c.request << " -> " << reply;
    if (!c.desc.empty()) {
      EXPECT_EQ(ErrorDesc(reply), c.desc) << c.request;
    }
  }
  // Two requests in one write, one split across writes: each gets its own reply.
  client->SendRaw(R"({"execute":"query-version","id":1}{"execute":"query-version","id":2})");
  EXPECT_EQ(client->ReadReply()["id"], 1);
  EXPECT_EQ(client->ReadReply()["id"], 2);
  client->SendRaw(R"({"execute":"query-ver)");
  client->SendRaw(R"(sion","id":3})");
  json reply = client->ReadReply();
  EXPECT_EQ(reply["id"], 3);
  EXPECT_EQ(reply["return"]["package"], "bexd " BEXD_VERSION);
  // As QEMU: a value or word outside an object gets its own error, and what follows it on the
  // same line is still served.
  client->SendRaw(R"("str"{"execute":"query-version","id":4}-7 oops {"execute":"query-version",)"
                  R"("id":5})"
                  "\n");
  EXPECT_EQ(ErrorDesc(client->ReadReply()), "QMP input must be a JSON object");
  EXPECT_EQ(client->ReadReply()["id"], 4);
  EXPECT_EQ(ErrorDesc(client->ReadReply()), "QMP input must be a JSON object");
  EXPECT_EQ(ErrorClass(client->ReadReply()), "GenericError");
  EXPECT_EQ(client->ReadReply()["id"], 5);
}

// Over 1 MiB, a request is refused at once and the rest of it skipped; its client stays.
TEST_F(ControlTest, HugeRequestIsRefusedAndTheClientStays) {
  StartDaemon();
  auto bystander = Connect();
  bystander->Negotiate();
  auto flooder = Connect();
  flooder->Negotiate();
  std::string chunk(64 * 1024, 'x');
  flooder->SendRaw(R"({"execute": "query-version", "id": ")");
  for (int i = 0; i < 20; ++i) flooder->SendRaw(chunk);  // 1.25 MiB, not finished yet
  json reply = flooder->ReadReply();
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply),
            "JSON token size limit exceeded (a request may be at most 1048576 bytes)");
  for (int i = 0; i < 20; ++i) flooder->SendRaw(chunk);
  flooder->SendRaw(R"("}{"execute": "query-version", "id": "after"})");
  reply = flooder->ReadReply();
  EXPECT_EQ(Success(reply), "");
  EXPECT_EQ(reply["id"], "after");

  EXPECT_TRUE(bystander->Execute("query-block-exports").contains("return"));
  auto newcomer = Connect();
  newcomer->Negotiate();
  EXPECT_TRUE(newcomer->Execute("query-named-block-nodes").contains("return"));
}

TEST_F(ControlTest, AbruptDisconnectsDoNotDisturbTheDaemon) {
  StartDaemon();
  for (int i = 0; i < 20; ++i) {
    auto client = Connect();
    client->SendRaw(R"({"execute": "qmp_capabilities"}{"execute": "query-block-exp)");
  }
  auto client = Connect();
  client->Negotiate();
  EXPECT_EQ(client->Execute("query-block-exports")["return"].size(), 1u);
}

TEST_F(ControlTest, ChardevMonitorWithPrettyOutput) {
  StartDaemon({"--chardev", "socket,id=m1,path=" + Path("pretty.sock") + ",server=on,wait=off",
               "--monitor", "chardev=m1,pretty=on"});
  QmpClient pretty(Path("pretty.sock"));
  ASSERT_TRUE(pretty.connected());
  EXPECT_TRUE(pretty.Negotiate().contains("QMP"));
  EXPECT_EQ(pretty.Execute("query-block-exports")["return"][0]["id"], "exp0");
  // The plain monitor next to it is unaffected.
  auto plain = Connect();
  plain->Negotiate();
  EXPECT_TRUE(plain->Execute("query-version").contains("return"));
}

}  // namespace
}  // namespace bexd::testing
