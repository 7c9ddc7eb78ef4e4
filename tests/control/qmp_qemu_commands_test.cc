// SPDX-License-Identifier: GPL-2.0-or-later
// The QEMU commands users' scripts call besides the export ones: iothread objects at run time
// (iotest 308's multi-threading case), block_resize, introspection, and QEMU's refusals.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <set>

#include "tests/control/control_fixture.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

json Iothread(const std::string& id) { return {{"qom-type", "iothread"}, {"id", id}}; }

TEST_F(ControlTest, IothreadObjectsAreAddedAndDeletedAtRunTime) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  for (const char* id : {"iothread0", "iothread1", "iothread2", "iothread3"}) {
    ASSERT_EQ(Success(client->Execute("object-add", Iothread(id))), "") << id;
  }
  json reply = client->Execute("object-add", Iothread("iothread0"));
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply),
            "attempt to add duplicate property 'iothread0' to object (type 'container')");
  reply = client->Execute("object-add", {{"qom-type", "secret"}, {"id", "s0"}, {"data", "x"}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");

  json iothreads = client->Execute("query-iothreads")["return"];
  ASSERT_EQ(iothreads.size(), 4u);
  EXPECT_EQ(iothreads[0]["id"], "iothread0");
  EXPECT_TRUE(iothreads[0]["thread-id"].is_number_integer());
  EXPECT_EQ(iothreads[0]["poll-max-ns"], 32768);

  // iotest 308's multi-threading export: a null node served by four queue threads.
  ASSERT_EQ(Success(client->Execute("blockdev-add", NullNode("null"))), "");
  json spec = FuseExport("export", "null", dir_.File("null"));
  spec["writable"] = false;
  spec["iothread"] = {"iothread0", "iothread1", "iothread2", "iothread3"};
  ASSERT_EQ(Success(client->Execute("block-export-add", spec)), "");
  json stats = client->Execute("x-query-export-stats", {{"id", "export"}})["return"];
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0]["queues"].size(), 4u);
  std::string data = ReadFile(dir_.path() + "/null");
  EXPECT_EQ(data, std::string(8 << 20, '\0'));

  reply = client->Execute("object-del", {{"id", "iothread2"}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply), "object 'iothread2' can't be deleted: export 'export' runs in it");
  ASSERT_EQ(Success(client->Execute("block-export-del", {{"id", "export"}})), "");
  EXPECT_TRUE(client->WaitEvent("BLOCK_EXPORT_DELETED").has_value());
  EXPECT_EQ(Success(client->Execute("object-del", {{"id", "iothread2"}})), "");
  reply = client->Execute("object-del", {{"id", "iothread2"}});
  EXPECT_EQ(ErrorDesc(reply), "object 'iothread2' not found");
  EXPECT_EQ(client->Execute("query-iothreads")["return"].size(), 3u);
  // A deleted iothread can no longer be named.
  spec["iothread"] = {"iothread2"};
  EXPECT_EQ(ErrorClass(client->Execute("block-export-add", spec)), "GenericError");
}

TEST_F(ControlTest, BlockResizeUnderBothNames) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  ASSERT_EQ(Success(client->Execute("block_resize", {{"node-name", "disk0"}, {"size", 32 << 20}})),
            "");
  struct stat image {};
  ASSERT_EQ(::stat(image_.c_str(), &image), 0);
  EXPECT_EQ(image.st_size, 32 << 20);
  EXPECT_EQ(client->Execute("query-named-block-nodes")["return"][0]["image"]["virtual-size"],
            32 << 20);
  ASSERT_EQ(Success(client->Execute("block-resize", {{"device", "disk0"}, {"size", 8 << 20}})), "");
  ASSERT_EQ(::stat(image_.c_str(), &image), 0);
  EXPECT_EQ(image.st_size, 8 << 20);

  json reply = client->Execute("block_resize", {{"node-name", "ghost"}, {"size", 4096}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply), "Cannot find device='' nor node-name='ghost'");
  reply = client->Execute("block_resize", {{"node-name", "disk0"}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");
}

TEST_F(ControlTest, IntrospectionListsEveryCommand) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  std::set<std::string> commands;
  for (const json& entry : client->Execute("query-commands")["return"]) {
    commands.insert(entry["name"]);
  }
  for (const char* name :
       {"qmp_capabilities", "quit", "query-version", "query-commands", "query-qmp-schema",
        "blockdev-add", "blockdev-del", "query-named-block-nodes", "block-export-add",
        "block-export-del", "query-block-exports", "object-add", "object-del", "query-iothreads",
        "block_resize", "block-resize"}) {
    EXPECT_TRUE(commands.contains(name)) << name;
  }
  json schema = client->Execute("query-qmp-schema")["return"];
  ASSERT_TRUE(schema.is_array());
  std::set<std::string> schema_commands, events, names;
  for (const json& info : schema) names.insert(info["name"]);
  for (const json& info : schema) {
    if (info["meta-type"] == "command") {
      schema_commands.insert(info["name"]);
      // Every type a command refers to is in the schema.
      EXPECT_TRUE(names.contains(info["arg-type"])) << info;
      EXPECT_TRUE(names.contains(info["ret-type"])) << info;
    }
    if (info["meta-type"] == "event") events.insert(info["name"]);
  }
  EXPECT_EQ(schema_commands, commands);
  EXPECT_TRUE(events.contains("SHUTDOWN"));
  EXPECT_TRUE(events.contains("BLOCK_EXPORT_DELETED"));

  json version = client->Execute("query-version")["return"];
  EXPECT_EQ(version, json({{"qemu", {{"major", 10}, {"minor", 1}, {"micro", 0}}},
                           {"package", "bexd " BEXD_VERSION}}));
  // QSD has no human monitor either.
  json reply = client->Execute("human-monitor-command", {{"command-line", "info block"}});
  EXPECT_EQ(ErrorClass(reply), "CommandNotFound");
  EXPECT_EQ(ErrorDesc(reply), "The command human-monitor-command has not been found");
}

}  // namespace
}  // namespace bexd::testing
