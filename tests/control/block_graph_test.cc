// SPDX-License-Identifier: GPL-2.0-or-later
// The block graph over QMP against a real bexd: raw over file by node name and inline,
// query-named-block-nodes in QEMU's shapes (a qcow2 chain compared field by field with
// qemu-storage-daemon's), blockdev-del refused with QEMU's errors while a node or an export uses
// a node, QEMU's permission conflicts, inline children closed with their parent, and data through
// a FUSE export of the raw node landing at its offset in the image.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>

#include "tests/control/control_fixture.h"
#include "tests/control/qsd_process.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

constexpr uint64_t kMiB = 1 << 20;

const json* FindNode(const json& nodes, const std::string& name) {
  for (const json& node : nodes) {
    if (node["node-name"] == name) return &node;
  }
  return nullptr;
}

std::string Pattern(size_t length, char seed) {
  std::string bytes(length, '\0');
  for (size_t i = 0; i < length; ++i) bytes[i] = static_cast<char>(seed + i * 7 + (i >> 12));
  return bytes;
}

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST_F(ControlTest, RawOverFileGraphOverQmp) {
  StartDaemon();
  const std::string part = dir_.File("part.img");
  std::ofstream(part) << Pattern(8 * kMiB, 'a');
  const std::string other = dir_.File("other.img", 2 * kMiB);
  auto client = Connect();
  client->Negotiate();

  ASSERT_EQ(Success(client->Execute(
                "blockdev-add", {{"driver", "file"}, {"node-name", "file1"}, {"filename", part}})),
            "");
  ASSERT_EQ(Success(client->Execute("blockdev-add", {{"driver", "raw"},
                                                     {"node-name", "fmt1"},
                                                     {"file", "file1"},
                                                     {"offset", kMiB},
                                                     {"size", 4 * kMiB}})),
            "");
  ASSERT_EQ(Success(client->Execute("blockdev-add",
                                    {{"driver", "raw"},
                                     {"node-name", "fmt2"},
                                     {"read-only", true},
                                     {"file", {{"driver", "file"}, {"filename", other}}}})),
            "");

  json nodes = client->Execute("query-named-block-nodes")["return"];
  ASSERT_EQ(nodes.size(), 5u) << nodes.dump(1);
  const json* fmt1 = FindNode(nodes, "fmt1");
  ASSERT_NE(fmt1, nullptr);
  EXPECT_EQ((*fmt1)["drv"], "raw");
  EXPECT_EQ((*fmt1)["ro"], false);
  EXPECT_EQ((*fmt1)["file"], part);
  EXPECT_EQ((*fmt1)["backing_file_depth"], 0);
  EXPECT_FALSE(fmt1->contains("backing_file"));
  EXPECT_EQ((*fmt1)["encrypted"], false);
  EXPECT_EQ((*fmt1)["cache"], json({{"writeback", true}, {"direct", false}, {"no-flush", false}}));
  const json& image = (*fmt1)["image"];
  EXPECT_EQ(image["filename"], part);
  EXPECT_EQ(image["format"], "raw");
  EXPECT_EQ(image["virtual-size"], 4 * kMiB);
  EXPECT_EQ(image["actual-size"], AllocatedBytes(part));
  EXPECT_FALSE(image.contains("backing-image"));
  const json* file1 = FindNode(nodes, "file1");
  ASSERT_NE(file1, nullptr);
  EXPECT_EQ((*file1)["drv"], "file");
  EXPECT_EQ((*file1)["file"], part);
  EXPECT_EQ((*file1)["image"]["format"], "file");
  EXPECT_EQ((*file1)["image"]["virtual-size"], 8 * kMiB);
  EXPECT_TRUE((*file1)["image"]["actual-size"].is_number_unsigned());

  // fmt2's file child was defined inline: named by bexd, read-only like its parent.
  std::string child_name;
  for (const json& node : nodes) {
    std::string name = node["node-name"];
    if (name.starts_with("#block")) child_name = name;
  }
  ASSERT_FALSE(child_name.empty()) << nodes.dump(1);
  const json* child = FindNode(nodes, child_name);
  EXPECT_EQ((*child)["drv"], "file");
  EXPECT_EQ((*child)["ro"], true);
  EXPECT_EQ((*child)["file"], other);
  EXPECT_EQ((*FindNode(nodes, "fmt2"))["file"], other);

  EXPECT_EQ(ErrorDesc(client->Execute("blockdev-del", {{"node-name", "file1"}})),
            "Block device file1 is in use");
  EXPECT_EQ(ErrorDesc(client->Execute("blockdev-del", {{"node-name", child_name}})),
            "Node " + child_name + " is not owned by the monitor");

  // Served by an export, the raw node is in use too; the export's data is the image's at the
  // offset, both ways.
  const std::string mountpoint = dir_.File("fmt1-mnt");
  ASSERT_EQ(Success(client->Execute("block-export-add", FuseExport("exp1", "fmt1", mountpoint))),
            "");
  EXPECT_EQ(ErrorDesc(client->Execute("blockdev-del", {{"node-name", "fmt1"}})),
            "Node fmt1 is in use");
  EXPECT_EQ(ReadFile(mountpoint), Pattern(8 * kMiB, 'a').substr(kMiB, 4 * kMiB));
  {
    int fd = ::open(mountpoint.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::pwrite(fd, "written through fmt1", 20, 4096), 20);
    EXPECT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  EXPECT_EQ(ReadFile(part).substr(kMiB + 4096, 20), "written through fmt1");
  json deleted;
  ASSERT_TRUE(WaitFor([&] {
    deleted = client->Execute("block-export-del", {{"id", "exp1"}});
    return ErrorDesc(deleted).find("is in use") == std::string::npos;
  }));
  ASSERT_EQ(Success(deleted), "");

  ASSERT_EQ(Success(client->Execute("blockdev-del", {{"node-name", "fmt1"}})), "");
  ASSERT_EQ(Success(client->Execute("blockdev-del", {{"node-name", "file1"}})), "");
  ASSERT_EQ(Success(client->Execute("blockdev-del", {{"node-name", "fmt2"}})), "");
  nodes = client->Execute("query-named-block-nodes")["return"];
  ASSERT_EQ(nodes.size(), 1u) << "the inline child went with fmt2: " << nodes.dump(1);
  EXPECT_EQ(nodes[0]["node-name"], "disk0");
}

TEST_F(ControlTest, FailedBlockdevAddLeavesNoNodeBehind) {
  StartDaemon();
  const std::string other = dir_.File("other.img", kMiB);
  auto client = Connect();
  client->Negotiate();
  struct Case {
    json arguments;
    std::string desc;
  } cases[] = {
      {{{"driver", "raw"}, {"node-name", "r"}, {"file", "ghost"}},
       "Cannot find device='ghost' nor node-name='ghost'"},
      {{{"driver", "qcow2"},
        {"node-name", "q"},
        {"file", {{"driver", "file"}, {"filename", other}, {"node-name", "proto"}}}},
       "node 'q': the image is not in qcow2 format (no qcow2 magic) (qcow2 image on file '" +
           other + "' (writable, aio=native, cache.direct=off))"},
      {{{"driver", "raw"},
        {"node-name", "r"},
        {"offset", 2 * kMiB},
        {"file", {{"driver", "file"}, {"filename", other}, {"node-name", "proto"}}}},
       "node 'r': offset 2097152 is past the end of its file child 'proto' (1048576 bytes)"},
      {{{"driver", "raw"},
        {"node-name", "r"},
        {"file", {{"driver", "file"}, {"filename", other}, {"node-name", "disk0"}}}},
       "Duplicate nodes with node-name='disk0'"},
      {{{"driver", "raw"}, {"node-name", "r"}, {"file", {{"driver", "file"}}}},
       "file.filename: missing (required)"},
  };
  for (const Case& c : cases) {
    json reply = client->Execute("blockdev-add", c.arguments);
    EXPECT_EQ(ErrorDesc(reply), c.desc) << c.arguments;
  }
  EXPECT_EQ(client->Execute("query-named-block-nodes")["return"].size(), 1u);
  // Nothing holds other.img: a writable node opens it.
  EXPECT_EQ(Success(client->Execute("blockdev-add",
                                    {{"driver", "file"}, {"node-name", "f"}, {"filename", other}})),
            "");
}

// A node of `nodes` that matches `node`: the same name, or for an automatically named one the
// same driver and file.
const json* Counterpart(const json& nodes, const json& node) {
  const std::string name = node["node-name"];
  for (const json& other : nodes) {
    if (!name.starts_with("#") && other["node-name"] == name) return &other;
    if (name.starts_with("#") && std::string(other["node-name"]).starts_with("#") &&
        other["drv"] == node["drv"] && other["file"] == node["file"]) {
      return &other;
    }
  }
  return nullptr;
}

// The same graph in qemu-storage-daemon 7.2 and in bexd: a qcow2 image over a file node by name
// whose backing chain (qcow2, then raw) comes from the headers, and a read-only v2 image with
// its file inline and backing=null. query-named-block-nodes must agree field by field (less the
// automatic names, which QEMU draws at random).
TEST_F(ControlTest, Qcow2GraphShowsAsQsdShowsIt) {
  int status = 0;
  auto run = [&](const std::string& command) {
    status = std::system((command + " >/dev/null 2>&1").c_str());
    ASSERT_EQ(status, 0) << command;
  };
  const std::string sub = Path("sub");
  run("mkdir -p " + sub);
  run("qemu-img create -f raw " + sub + "/base.raw 32M");
  run("qemu-io -f raw -c 'write -P 1 0 1M' " + sub + "/base.raw");
  run("qemu-img create -f qcow2 -o cluster_size=4k -b base.raw -F raw " + sub + "/mid.qcow2");
  run("qemu-io -c 'write -P 2 1M 1M' " + sub + "/mid.qcow2");
  run("qemu-img create -f qcow2 -b sub/mid.qcow2 -F qcow2 " + Path("top.qcow2"));
  run("qemu-io -c 'write -P 3 64k 64k' " + Path("top.qcow2"));
  run("qemu-img create -f qcow2 -o compat=0.10 -b top.qcow2 -F qcow2 " + Path("v2.qcow2") + " 48M");
  const std::vector<std::string> graph = {
      "--blockdev",
      "driver=file,node-name=file0,filename=" + Path("top.qcow2"),
      "--blockdev",
      "driver=qcow2,node-name=fmt0,file=file0",
      "--blockdev",
      // JSON: in QEMU's keyval, backing=null names a node called "null".
      json({{"driver", "qcow2"},
            {"node-name", "fmt1"},
            {"read-only", true},
            {"backing", nullptr},
            {"file", {{"driver", "file"}, {"filename", Path("v2.qcow2")}}}})
          .dump(),
  };

  json expected;
  {
    const std::string qsd_socket = Path("qsd.sock");
    Qsd qsd(graph, qsd_socket);
    ASSERT_TRUE(qsd.started());
    QmpClient qsd_client(qsd_socket);
    ASSERT_TRUE(qsd_client.connected());
    qsd_client.Negotiate();
    expected = qsd_client.Execute("query-named-block-nodes")["return"];
  }
  std::vector<std::string> extra = graph;
  StartDaemon(extra);
  auto client = Connect();
  client->Negotiate();
  json nodes = client->Execute("query-named-block-nodes")["return"];
  // bexd's own disk0 is not in QSD's graph.
  ASSERT_EQ(nodes.size(), expected.size() + 1) << nodes.dump(1) << expected.dump(1);
  for (const json& node : expected) {
    const json* ours = Counterpart(nodes, node);
    ASSERT_NE(ours, nullptr) << "no counterpart in bexd for " << node.dump(1);
    json theirs = node;
    json mine = *ours;
    mine["node-name"] = theirs["node-name"];
    if (theirs["node-name"] == "fmt1") {
      // QEMU names a node whose options say more than its file name with all of them
      // ("json:{...backing: null...}"); bexd keeps the file name.
      EXPECT_TRUE(std::string(theirs["file"]).starts_with("json:{")) << theirs["file"];
      theirs["file"] = mine["file"];
      theirs["image"]["filename"] = mine["image"]["filename"];
    }
    for (const auto& [key, value] : theirs.items()) {
      EXPECT_EQ(mine.value(key, json()), value) << node["node-name"] << " " << key;
    }
    // QEMU 10.0 added "active" (false for nodes block-set-active deactivated); 7.2 lacks it.
    EXPECT_EQ(mine["active"], true) << node["node-name"];
    mine.erase("active");
    for (const auto& [key, value] : mine.items()) {
      EXPECT_TRUE(theirs.contains(key)) << node["node-name"] << ": bexd shows " << key;
    }
  }
  const json* fmt0 = FindNode(nodes, "fmt0");
  ASSERT_NE(fmt0, nullptr);
  EXPECT_EQ((*fmt0)["backing_file_depth"], 2);
  EXPECT_EQ((*fmt0)["image"]["backing-image"]["backing-image"]["format"], "raw");

  // The automatic backing nodes belong to fmt0; fmt0's file child is in use.
  EXPECT_EQ(ErrorDesc(client->Execute("blockdev-del", {{"node-name", "file0"}})),
            "Block device file0 is in use");
  ASSERT_EQ(Success(client->Execute("blockdev-del", {{"node-name", "fmt0"}})), "");
  EXPECT_EQ(client->Execute("query-named-block-nodes")["return"].size(), 4u)
      << "the backing chain closed with fmt0";
}

// A node given as backing by name is held by its parent (QEMU's error), and the qcow2 node's
// claim on its file child conflicts with a writable export of it, with QEMU's error.
TEST_F(ControlTest, Qcow2ChildrenAreHeldAndPermissionsConflictAsInQemu) {
  int status = std::system(("qemu-img create -f qcow2 " + Path("base.qcow2") +
                            " 8M >/dev/null && qemu-img create -f qcow2 " + Path("top.qcow2") +
                            " 8M >/dev/null && qemu-img create -f qcow2 " + Path("two.qcow2") +
                            " 8M >/dev/null")
                               .c_str());
  ASSERT_EQ(status, 0);
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  ASSERT_EQ(
      Success(client->Execute("blockdev-add",
                              {{"driver", "qcow2"},
                               {"node-name", "base0"},
                               {"read-only", true},
                               {"file", {{"driver", "file"}, {"filename", Path("base.qcow2")}}}})),
      "");
  ASSERT_EQ(Success(client->Execute(
                "blockdev-add", {{"driver", "qcow2"},
                                 {"node-name", "top0"},
                                 {"backing", "base0"},
                                 {"file", {{"driver", "file"}, {"filename", Path("top.qcow2")}}}})),
            "");
  EXPECT_EQ(ErrorDesc(client->Execute("blockdev-del", {{"node-name", "base0"}})),
            "Node 'base0' is busy: node is used as backing hd of 'top0'");
  json nodes = client->Execute("query-named-block-nodes")["return"];
  EXPECT_EQ((*FindNode(nodes, "top0"))["backing_file"], Path("base.qcow2"));
  EXPECT_EQ((*FindNode(nodes, "top0"))["backing_file_depth"], 1);

  // disk0 is exported writable (exp0): a qcow2 node over it may not refuse others writes.
  EXPECT_EQ(ErrorDesc(client->Execute(
                "blockdev-add", {{"driver", "qcow2"}, {"node-name", "q"}, {"file", "disk0"}})),
            "Permission conflict on node 'disk0': permissions 'write, resize' are both required "
            "by export 'exp0' (uses node 'disk0' as 'root' child) and unshared by node 'q' (uses "
            "node 'disk0' as 'file' child).");
  EXPECT_EQ(FindNode(client->Execute("query-named-block-nodes")["return"], "q"), nullptr);
  // A raw node without offset or size passes the export's writes through: no conflict.
  EXPECT_EQ(Success(client->Execute("blockdev-add",
                                    {{"driver", "raw"}, {"node-name", "r"}, {"file", "disk0"}})),
            "");
  // Two writable qcow2 nodes on one file: each refuses what the other takes.
  ASSERT_EQ(Success(client->Execute(
                "blockdev-add",
                {{"driver", "file"}, {"node-name", "f2"}, {"filename", Path("two.qcow2")}})),
            "");
  ASSERT_EQ(Success(client->Execute("blockdev-add",
                                    {{"driver", "qcow2"}, {"node-name", "w1"}, {"file", "f2"}})),
            "");
  EXPECT_EQ(ErrorDesc(client->Execute("blockdev-add",
                                      {{"driver", "qcow2"}, {"node-name", "w2"}, {"file", "f2"}})),
            "Permission conflict on node 'f2': permissions 'write, resize' are both required by "
            "node 'w1' (uses node 'f2' as 'file' child) and unshared by node 'w2' (uses node 'f2' "
            "as 'file' child).");
  // Read-only, both can.
  ASSERT_EQ(Success(client->Execute("blockdev-del", {{"node-name", "w1"}})), "");
  for (const char* name : {"r1", "r2"}) {
    EXPECT_EQ(Success(client->Execute(
                  "blockdev-add",
                  {{"driver", "qcow2"}, {"node-name", name}, {"read-only", true}, {"file", "f2"}})),
              "");
  }
}

}  // namespace
}  // namespace bexd::testing
