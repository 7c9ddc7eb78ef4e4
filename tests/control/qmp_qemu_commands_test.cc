// SPDX-License-Identifier: GPL-2.0-or-later
// The QEMU commands users' scripts call besides the export ones: iothread objects at run time
// (iotest 308's multi-threading case), block_resize, introspection, and QEMU's refusals.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <set>

#include "tests/control/control_fixture.h"
#include "tests/support/qemu_check.h"

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
  // Secrets share the namespace, as every QEMU object does.
  ASSERT_EQ(
      Success(client->Execute("object-add", {{"qom-type", "secret"}, {"id", "s0"}, {"data", "x"}})),
      "");
  for (const json& object :
       {json{{"qom-type", "secret"}, {"id", "iothread1"}, {"data", "x"}}, Iothread("s0")}) {
    reply = client->Execute("object-add", object);
    EXPECT_EQ(ErrorDesc(reply), "attempt to add duplicate property '" +
                                    object["id"].get<std::string>() +
                                    "' to object (type 'container')");
  }
  reply = client->Execute("object-add", {{"qom-type", "secret"}, {"id", "s1"}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  // TLS credentials too (nbd's tls-creds), with their files checked as they are added.
  const std::string pki = dir_.path() + "/pki";
  ASSERT_EQ(std::system(("mkdir -p " + pki + " && touch " + pki + "/ca-cert.pem").c_str()), 0);
  json tls = {{"qom-type", "tls-creds-x509"}, {"id", "tls0"}, {"dir", pki}, {"endpoint", "client"}};
  ASSERT_EQ(Success(client->Execute("object-add", tls)), "");
  EXPECT_EQ(ErrorDesc(client->Execute("object-add", tls)),
            "attempt to add duplicate property 'tls0' to object (type 'container')");
  tls["id"] = "tls1";
  tls["dir"] = dir_.path();
  EXPECT_EQ(ErrorDesc(client->Execute("object-add", tls)),
            "dir: cannot read '" + dir_.path() +
                "/ca-cert.pem' (the CA that signs the server's certificate; verify-peer=on): No "
                "such file or directory");
  EXPECT_EQ(Success(client->Execute("object-del", {{"id", "tls0"}})), "");
  // A qom-type that is no string is an error, not the end of the daemon.
  EXPECT_EQ(ErrorDesc(client->Execute("object-add", {{"qom-type", 5}, {"id", "x"}})),
            "qom-type: expected a string, got 5");
  EXPECT_EQ(Success(client->Execute("object-del", {{"id", "s0"}})), "");
  EXPECT_EQ(ErrorDesc(client->Execute("object-del", {{"id", "s0"}})), "object 's0' not found");
  // QEMU's iothread properties, as given (libvirt sets poll-max-ns).
  json tuned = Iothread("tuned");
  tuned["poll-max-ns"] = 0;
  tuned["aio-max-batch"] = 16;
  ASSERT_EQ(Success(client->Execute("object-add", tuned)), "");

  json iothreads = client->Execute("query-iothreads")["return"];
  ASSERT_EQ(iothreads.size(), 5u);
  EXPECT_EQ(iothreads[0]["id"], "iothread0");
  EXPECT_TRUE(iothreads[0]["thread-id"].is_number_integer());
  EXPECT_EQ(iothreads[0]["poll-max-ns"], 32768);
  EXPECT_EQ(iothreads[4]["id"], "tuned");
  EXPECT_EQ(iothreads[4]["poll-max-ns"], 0);
  EXPECT_EQ(iothreads[4]["aio-max-batch"], 16);
  EXPECT_EQ(Success(client->Execute("object-del", {{"id", "tuned"}})), "");

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
  ASSERT_EQ(
      Success(client->Execute("blockdev-add",
                              {{"driver", "null-co"}, {"node-name", "ro0"}, {"read-only", true}})),
      "");
  reply = client->Execute("block_resize", {{"node-name", "ro0"}, {"size", 4096}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply), "Image is read-only");  // QEMU's words
}

// block_resize of a qcow2 node as QEMU's: a size in whole sectors only (QEMU's header would lose
// the tail of any other), and a shrink over data frees the clusters past the end (qemu-img check
// finds no leak, qemu-img reads the data before the new end).
TEST_F(ControlTest, BlockResizeOfQcow2KeepsWholeSectorsAndShrinksOverData) {
  const std::string image = Path("resize.qcow2");
  for (const std::string& command :
       {"qemu-img create -f qcow2 " + image + " 8M", "qemu-io -c 'write -P 7 0 8M' " + image}) {
    ASSERT_EQ(std::system((command + " >/dev/null 2>&1").c_str()), 0) << command;
  }
  StartDaemon({"--blockdev", "driver=qcow2,node-name=q0,file.driver=file,file.filename=" + image});
  auto client = Connect();
  client->Negotiate();
  json reply = client->Execute("block_resize", {{"node-name", "q0"}, {"size", (32 << 20) + 100}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply),
            "node 'q0': the new size must be a multiple of 512 (33554532 was asked)");
  ASSERT_EQ(Success(client->Execute("block_resize", {{"node-name", "q0"}, {"size", 1 << 20}})), "");
  ASSERT_EQ(Success(client->Execute("blockdev-del", {{"node-name", "q0"}})), "");
  CheckResult check = QemuCheck(image);
  EXPECT_EQ(check.exit_status, 0) << check.output;
  EXPECT_EQ(check.corruptions + check.leaks, 0u) << check.output;
  EXPECT_EQ(std::system(("qemu-img info " + image + " | grep -q '(1048576 bytes)'").c_str()), 0);
  // qemu-io exits 1 when the pattern differs.
  EXPECT_EQ(std::system(("qemu-io -c 'read -P 7 0 1M' " + image + " >/dev/null").c_str()), 0);
}

// block_resize of a node whose parent relies on its size is refused as QEMU refuses it, and the
// image keeps its size and data: a qcow2 node's file, a raw window's file.
TEST_F(ControlTest, BlockResizeRefusesANodeWhoseParentRefusesToShareResize) {
  const std::string image = Path("parent.qcow2");
  for (const std::string& command :
       {"qemu-img create -f qcow2 " + image + " 8M", "qemu-io -c 'write -P 7 0 1M' " + image}) {
    ASSERT_EQ(std::system((command + " >/dev/null 2>&1").c_str()), 0) << command;
  }
  const std::string window = dir_.File("window.img", 4 << 20);
  StartDaemon({"--blockdev", "driver=file,node-name=qfile,filename=" + image, "--blockdev",
               "driver=qcow2,node-name=q0,file=qfile", "--blockdev",
               "driver=file,node-name=wfile,filename=" + window, "--blockdev",
               "driver=raw,node-name=w0,file=wfile,offset=1048576,size=2097152"});
  auto client = Connect();
  client->Negotiate();
  struct stat before {};
  ASSERT_EQ(::stat(image.c_str(), &before), 0);
  json reply = client->Execute("block_resize", {{"node-name", "qfile"}, {"size", 65536}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply),
            "Permission conflict on node 'qfile': permissions 'resize' are both required by an "
            "unnamed block device (uses node 'qfile' as 'root' child) and unshared by node 'q0' "
            "(uses node 'qfile' as 'file' child).");
  reply = client->Execute("block_resize", {{"node-name", "wfile"}, {"size", 1 << 20}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_NE(ErrorDesc(reply).find("unshared by node 'w0'"), std::string::npos) << reply.dump();
  struct stat after {};
  ASSERT_EQ(::stat(image.c_str(), &after), 0);
  EXPECT_EQ(after.st_size, before.st_size);
  ASSERT_EQ(::stat(window.c_str(), &after), 0);
  EXPECT_EQ(after.st_size, 4 << 20);
  // The format node itself can be resized.
  ASSERT_EQ(Success(client->Execute("block_resize", {{"node-name", "q0"}, {"size", 16 << 20}})),
            "");
  for (const char* node : {"q0", "qfile"}) {
    ASSERT_EQ(Success(client->Execute("blockdev-del", {{"node-name", node}})), "") << node;
  }
  CheckResult check = QemuCheck(image);
  EXPECT_EQ(check.exit_status, 0) << check.output;
  EXPECT_EQ(check.corruptions + check.leaks, 0u) << check.output;
  EXPECT_EQ(std::system(("qemu-io -c 'read -P 7 0 1M' " + image + " >/dev/null").c_str()), 0);
}

// query-named-block-nodes in QEMU's field types: file and image.filename are the path (or QEMU's
// pseudo file name), the switches come from the node's options, throttling and thresholds are 0.
TEST_F(ControlTest, NamedBlockNodesHaveQemusFieldTypes) {
  const std::string read_only = dir_.File("ro.img", 1 << 20);
  const std::string zeroes = dir_.File("dz.img", 1 << 20);
  StartDaemon({"--blockdev", "driver=file,node-name=ro0,read-only=on,filename=" + read_only,
               "--blockdev",
               "driver=file,node-name=dz0,detect-zeroes=unmap,discard=unmap,cache.no-flush=on,"
               "filename=" +
                   zeroes,
               "--blockdev", "driver=null-co,node-name=null0,detect-zeroes=on"});
  auto client = Connect();
  client->Negotiate();
  json nodes = client->Execute("query-named-block-nodes")["return"];
  ASSERT_EQ(nodes.size(), 4u) << nodes.dump(1);
  std::map<std::string, json> by_name;
  for (const json& node : nodes) by_name[node["node-name"].get<std::string>()] = node;

  struct Expected {
    std::string name, drv, file;
    bool ro;
    std::string detect_zeroes;
    bool no_flush;
  } cases[] = {
      {"disk0", "file", image_, false, "off", false},
      {"ro0", "file", read_only, true, "off", false},
      {"dz0", "file", zeroes, false, "unmap", true},
      {"null0", "null-co", "null-co://", false, "on", false},
  };
  for (const Expected& expected : cases) {
    SCOPED_TRACE(expected.name);
    ASSERT_TRUE(by_name.contains(expected.name));
    const json& node = by_name[expected.name];
    EXPECT_EQ(node["drv"], expected.drv);
    EXPECT_EQ(node["file"], expected.file);
    EXPECT_EQ(node["image"]["filename"], expected.file);
    EXPECT_EQ(node["image"]["format"], expected.drv);
    EXPECT_EQ(node["ro"], expected.ro);
    EXPECT_EQ(node["encrypted"], false);
    EXPECT_EQ(node["active"], true);
    EXPECT_EQ(node["detect_zeroes"], expected.detect_zeroes);
    EXPECT_EQ(node["backing_file_depth"], 0);
    EXPECT_FALSE(node.contains("backing_file"));
    EXPECT_EQ(node["cache"],
              json({{"writeback", true}, {"direct", false}, {"no-flush", expected.no_flush}}));
    for (const char* field :
         {"bps", "bps_rd", "bps_wr", "iops", "iops_rd", "iops_wr", "write_threshold"}) {
      EXPECT_TRUE(node[field].is_number_integer()) << field;
      EXPECT_EQ(node[field], 0) << field;
    }
  }
  // A read-only node refuses writes whatever a client asks.
  json spec = FuseExport("ro-export", "ro0", dir_.File("ro-mnt"));
  EXPECT_EQ(ErrorClass(client->Execute("block-export-add", spec)), "GenericError");
}

TEST_F(ControlTest, IntrospectionListsEveryCommand) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  json listed = client->Execute("query-commands");
  ASSERT_EQ(Success(listed), "");
  std::set<std::string> commands;
  for (const json& entry : listed["return"]) {
    commands.insert(entry["name"].get<std::string>());
  }
  for (const char* name :
       {"qmp_capabilities", "quit", "query-version", "query-commands", "query-qmp-schema",
        "blockdev-add", "blockdev-del", "query-named-block-nodes", "block-export-add",
        "block-export-del", "query-block-exports", "object-add", "object-del", "query-iothreads",
        "block_resize", "block-resize", "query-block", "query-jobs", "query-block-jobs"}) {
    EXPECT_TRUE(commands.contains(name)) << name;
  }
  // No named block backends (as in QSD, whose exports' are anonymous) and no jobs.
  for (const char* name : {"query-block", "query-jobs", "query-block-jobs"}) {
    EXPECT_EQ(client->Execute(name), json({{"return", json::array()}})) << name;
    EXPECT_EQ(ErrorClass(client->Execute(name, {{"device", "x"}})), "GenericError") << name;
  }
  json schema = client->Execute("query-qmp-schema")["return"];
  ASSERT_TRUE(schema.is_array());
  std::set<std::string> schema_commands, events, names;
  for (const json& info : schema) names.insert(info["name"].get<std::string>());
  for (const json& info : schema) {
    if (info["meta-type"] == "command") {
      schema_commands.insert(info["name"].get<std::string>());
      // Every type a command refers to is in the schema.
      EXPECT_TRUE(names.contains(info["arg-type"].get<std::string>())) << info;
      EXPECT_TRUE(names.contains(info["ret-type"].get<std::string>())) << info;
    }
    if (info["meta-type"] == "event") events.insert(info["name"].get<std::string>());
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
