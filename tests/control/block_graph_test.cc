// The block graph over QMP against a real bexd: raw over file by node name and inline,
// query-named-block-nodes in QEMU's shapes, blockdev-del refused with QEMU's errors while a node
// or an export uses a node, inline children closed with their parent, and data through a FUSE
// export of the raw node landing at its offset in the image.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>

#include "tests/control/control_fixture.h"

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
        {"file", {{"driver", "file"}, {"filename", other}}}},
       "node 'q': the qcow2 driver is not built into this bexd yet"},
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

}  // namespace
}  // namespace bexd::testing
