// SPDX-License-Identifier: GPL-2.0-or-later
// The block graph over real files: children by name and inline, automatic names, references
// counted on delete with QEMU's errors, inline children closed with their parent, failures that
// leave nothing open, and image locks across the graph.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "block/graph.h"
#include "tests/block/file_fixture.h"

namespace bexd::block {
namespace {

constexpr uint64_t kMiB = 1 << 20;

BlockdevOptions FileNodeOptions(const std::string& path, const std::string& name = "",
                                bool read_only = false) {
  BlockdevOptions options;
  options.node_name = name;
  options.read_only = read_only;
  options.driver = FileOptions{.filename = path};
  return options;
}

BlockdevOptions RawOver(ChildRef file, const std::string& name, bool read_only = false,
                        RawOptions raw = {}) {
  BlockdevOptions options;
  options.node_name = name;
  options.read_only = read_only;
  options.driver = raw;
  options.file = std::move(file);
  return options;
}

ChildRef Inline(const BlockdevOptions& options) {
  return ChildRef{.kind = ChildRef::Kind::kInline,
                  .options = std::make_shared<BlockdevOptions>(options)};
}

ChildRef Named(const std::string& name) {
  return ChildRef{.kind = ChildRef::Kind::kReference, .node_name = name};
}

// Whether another open of `path` (as a separate node, like another process) gets its lock.
bool CanOpen(const std::string& path, bool read_only) {
  return testing::OpenFile(FileOptions{.filename = path}, read_only, "probe").ok();
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

class GraphTest : public ::testing::Test {
 protected:
  void SetUp() override { image_ = dir_.CreateFile("disk.img", 4 * kMiB); }

  testing::ScratchDir dir_;
  std::string image_;
  BlockGraph graph_;
};

TEST_F(GraphTest, InlineChildIsNamedAutomaticallyAndClosesWithItsParent) {
  ASSERT_TRUE(graph_.Add(RawOver(Inline(FileNodeOptions(image_)), "fmt0")).ok());
  ASSERT_EQ(graph_.entries().size(), 2u);
  const BlockGraph::Entry* parent = graph_.Find("fmt0");
  ASSERT_NE(parent, nullptr);
  const BlockGraph::Child* file = parent->FindChild("file");
  ASSERT_NE(file, nullptr);
  EXPECT_TRUE(file->node_name.starts_with("#block")) << file->node_name;
  const BlockGraph::Entry* child = graph_.Find(file->node_name);
  ASSERT_NE(child, nullptr);
  EXPECT_FALSE(child->monitor_owned);
  EXPECT_TRUE(parent->monitor_owned);
  EXPECT_EQ(child->node->filename(), image_);
  EXPECT_EQ(parent->node->size(), 4 * kMiB);

  EXPECT_EQ(Message(graph_.Delete(file->node_name)),
            "Node " + file->node_name + " is not owned by the monitor");
  EXPECT_FALSE(CanOpen(image_, /*read_only=*/true)) << "the writable child locks the image";
  ASSERT_TRUE(graph_.Delete("fmt0").ok());
  EXPECT_TRUE(graph_.entries().empty());
  EXPECT_TRUE(CanOpen(image_, /*read_only=*/false)) << "the child's lock went with it";
}

TEST_F(GraphTest, ReferencedNodesCannotBeDeleted) {
  ASSERT_TRUE(graph_.Add(FileNodeOptions(image_, "file0")).ok());
  ASSERT_TRUE(graph_.Add(RawOver(Named("file0"), "fmt0")).ok());
  ASSERT_TRUE(graph_.Add(RawOver(Named("file0"), "fmt1", false, RawOptions{.offset = kMiB})).ok());
  EXPECT_EQ(graph_.Find("fmt1")->node->size(), 3 * kMiB);
  EXPECT_EQ(Message(graph_.Delete("file0")), "Block device file0 is in use");
  ASSERT_TRUE(graph_.Delete("fmt0").ok());
  EXPECT_EQ(Message(graph_.Delete("file0")), "Block device file0 is in use");
  ASSERT_TRUE(graph_.Delete("fmt1").ok());
  // A node the monitor added stays when its last parent goes.
  ASSERT_NE(graph_.Find("file0"), nullptr);
  ASSERT_TRUE(graph_.Delete("file0").ok());
  EXPECT_EQ(Message(graph_.Delete("file0")), "Failed to find node with node-name='file0'");
}

TEST_F(GraphTest, UnknownAndDuplicateNames) {
  EXPECT_EQ(Message(graph_.Add(RawOver(Named("ghost"), "fmt0"))),
            "Cannot find device='ghost' nor node-name='ghost'");
  ASSERT_TRUE(graph_.Add(FileNodeOptions(image_, "file0", /*read_only=*/true)).ok());
  EXPECT_EQ(Message(graph_.Add(FileNodeOptions(image_, "file0", true))),
            "Duplicate nodes with node-name='file0'");
  // The inline child opens first and clashes; nothing it opened stays.
  EXPECT_EQ(
      Message(graph_.Add(RawOver(Inline(FileNodeOptions(image_, "file0", true)), "fmt0", true))),
      "Duplicate nodes with node-name='file0'");
  EXPECT_EQ(graph_.entries().size(), 1u);
}

TEST_F(GraphTest, WritableNodeNeedsAWritableFileChild) {
  ASSERT_TRUE(graph_.Add(FileNodeOptions(image_, "file0", /*read_only=*/true)).ok());
  EXPECT_EQ(Message(graph_.Add(RawOver(Named("file0"), "fmt0"))),
            "node 'fmt0': its file child 'file0' is read-only, so the node cannot be writable "
            "(give it read-only=on, or a writable file child)");
  // The same for a child defined inline that asks for read-only itself.
  std::string inline_error =
      Message(graph_.Add(RawOver(Inline(FileNodeOptions(image_, "", true)), "fmt1")));
  EXPECT_TRUE(inline_error.starts_with("node 'fmt1': its file child '#block")) << inline_error;
  EXPECT_EQ(graph_.entries().size(), 1u);
  EXPECT_TRUE(graph_.Add(RawOver(Named("file0"), "fmt0", /*read_only=*/true)).ok());
  EXPECT_TRUE(graph_.Find("fmt0")->node->read_only());
}

TEST_F(GraphTest, ImageLocksFollowTheGraph) {
  // A writable format node writes its image: nobody else may open it, not even to read.
  ASSERT_TRUE(graph_.Add(RawOver(Inline(FileNodeOptions(image_)), "fmt0")).ok());
  EXPECT_FALSE(CanOpen(image_, /*read_only=*/true));
  ASSERT_TRUE(graph_.Delete("fmt0").ok());

  // A read-only one (its inline child inherits read-only) shares the image with readers only.
  BlockdevOptions child = FileNodeOptions(image_);
  child.read_only = true;
  ASSERT_TRUE(graph_.Add(RawOver(Inline(child), "fmt0", /*read_only=*/true)).ok());
  EXPECT_TRUE(CanOpen(image_, /*read_only=*/true));
  EXPECT_FALSE(CanOpen(image_, /*read_only=*/false));
}

TEST_F(GraphTest, FailedOpenClosesTheChildrenItOpened) {
  std::string error = Message(graph_.Add(
      RawOver(Inline(FileNodeOptions(image_)), "fmt0", false, RawOptions{.offset = 8 * kMiB})));
  EXPECT_TRUE(
      error.starts_with("node 'fmt0': offset 8388608 is past the end of its file child "
                        "'#block"))
      << error;
  EXPECT_TRUE(graph_.entries().empty());
  EXPECT_TRUE(CanOpen(image_, /*read_only=*/false));
}

TEST_F(GraphTest, NotAQcow2ImageLeavesNothingOpen) {
  BlockdevOptions qcow2;
  qcow2.node_name = "fmt0";
  qcow2.driver = Qcow2Options{};
  qcow2.file = Inline(FileNodeOptions(image_, "proto0"));
  EXPECT_EQ(
      Message(graph_.Add(qcow2)),
      "node 'fmt0': the image is not in qcow2 format (no qcow2 magic) (qcow2 image on file '" +
          image_ + "' (writable, aio=native, cache.direct=off))");
  qcow2.backing = ChildRef{.kind = ChildRef::Kind::kNull};
  EXPECT_FALSE(graph_.Add(qcow2).ok());
  EXPECT_TRUE(graph_.entries().empty());
  EXPECT_TRUE(CanOpen(image_, /*read_only=*/false));
}

// The backing chain the headers name opens by itself, read-only (other readers may share the
// files, no writer may), relative to each image's directory, and closes with the image.
TEST_F(GraphTest, Qcow2BackingChainFromTheHeadersOpensReadOnlyAndShared) {
  const std::string dir = dir_.path();
  ASSERT_EQ(
      std::system(("mkdir -p " + dir + "/sub && qemu-img create -q -f raw " + dir +
                   "/sub/base.raw 4M && qemu-img create -q -f qcow2 -b base.raw -F raw " + dir +
                   "/sub/mid.qcow2 && qemu-img create -q -f qcow2 -b sub/mid.qcow2 -F qcow2 " +
                   dir + "/top.qcow2")
                      .c_str()),
      0);
  BlockdevOptions qcow2;
  qcow2.node_name = "fmt0";
  qcow2.driver = Qcow2Options{};
  qcow2.file = Inline(FileNodeOptions(dir + "/top.qcow2"));
  ASSERT_TRUE(graph_.Add(qcow2).ok()) << graph_.Add(qcow2);
  // top's file, base's file, base (raw), mid's file, mid, top.
  ASSERT_EQ(graph_.entries().size(), 6u);
  const BlockGraph::Child* backing = graph_.Find("fmt0")->FindChild("backing");
  ASSERT_NE(backing, nullptr);
  const BlockGraph::Entry* mid = graph_.Find(backing->node_name);
  EXPECT_EQ(mid->node->driver_name(), "qcow2");
  EXPECT_TRUE(mid->node->read_only());
  EXPECT_EQ(mid->node->filename(), dir + "/sub/mid.qcow2");
  const BlockGraph::Entry* base = graph_.Find(mid->FindChild("backing")->node_name);
  EXPECT_EQ(base->node->driver_name(), "raw");
  EXPECT_TRUE(base->node->read_only());
  for (const char* file : {"/sub/mid.qcow2", "/sub/base.raw"}) {
    EXPECT_TRUE(CanOpen(dir + file, /*read_only=*/true)) << file;
    EXPECT_FALSE(CanOpen(dir + file, /*read_only=*/false)) << file;
  }
  EXPECT_FALSE(CanOpen(dir + "/top.qcow2", /*read_only=*/true));
  ASSERT_TRUE(graph_.Delete("fmt0").ok());
  EXPECT_TRUE(graph_.entries().empty());
  EXPECT_TRUE(CanOpen(dir + "/sub/base.raw", /*read_only=*/false));
}

// Headers whose backing files come back to an image already in the chain (one naming itself,
// a -> b -> a) would open forever; they are refused, as qemu-img calls them an infinite loop. A
// backing file that is missing, or not in the format the header says, is named, with the node
// that wanted it.
TEST_F(GraphTest, BackingFilesThatLoopOrAreMissingAreRefused) {
  const std::string dir = dir_.path();
  ASSERT_EQ(
      std::system(("cd " + dir +
                   " && qemu-img create -q -f qcow2 self.qcow2 4M"
                   " && qemu-img rebase -q -u -b self.qcow2 -F qcow2 self.qcow2"
                   " && qemu-img create -q -f qcow2 a.qcow2 4M"
                   " && qemu-img create -q -f qcow2 -b a.qcow2 -F qcow2 b.qcow2"
                   " && qemu-img rebase -q -u -b b.qcow2 -F qcow2 a.qcow2"
                   " && qemu-img create -q -f qcow2 -b gone.qcow2 -F qcow2 -u orphan.qcow2 4M"
                   " && truncate -s 4M plain.raw"
                   " && qemu-img create -q -f qcow2 -b plain.raw -F qcow2 -u misnamed.qcow2 4M")
                      .c_str()),
      0);
  auto open = [&](const std::string& name) {
    BlockdevOptions qcow2;
    qcow2.node_name = "fmt0";
    qcow2.read_only = true;
    qcow2.driver = Qcow2Options{};
    qcow2.file = Inline(FileNodeOptions(dir + "/" + name, "", /*read_only=*/true));
    return Message(graph_.Add(qcow2));
  };
  EXPECT_EQ(open("self.qcow2"), "node 'fmt0': backing file '" + dir +
                                    "/self.qcow2' is already in the backing chain above it: the "
                                    "images' backing files form a loop");
  const std::string loop = open("a.qcow2");
  EXPECT_TRUE(loop.starts_with("node 'fmt0': Could not open backing file '" + dir + "/b.qcow2'"))
      << loop;
  EXPECT_TRUE(loop.ends_with("backing file '" + dir +
                             "/a.qcow2' is already in the backing chain above it: the images' "
                             "backing files form a loop"))
      << loop;
  const std::string orphan = open("orphan.qcow2");
  EXPECT_TRUE(
      orphan.starts_with("node 'fmt0': Could not open backing file '" + dir + "/gone.qcow2': "))
      << orphan;
  EXPECT_TRUE(orphan.ends_with("No such file or directory")) << orphan;
  // The backing file's own node has no name yet: only the outer message names one.
  const std::string misnamed = open("misnamed.qcow2");
  EXPECT_TRUE(misnamed.starts_with("node 'fmt0': Could not open backing file '" + dir +
                                   "/plain.raw': the image is not in qcow2 format (no qcow2 "
                                   "magic) (qcow2 image on file '" +
                                   dir + "/plain.raw'"))
      << misnamed;
  EXPECT_TRUE(graph_.entries().empty());
}

TEST_F(GraphTest, AnExportedInlineChildOutlivesItsParent) {
  BlockdevOptions child = FileNodeOptions(image_, "proto0");
  ASSERT_TRUE(graph_.Add(RawOver(Inline(child), "fmt0")).ok());
  graph_.Retain("proto0", "e0", false);
  ASSERT_TRUE(graph_.Delete("fmt0").ok());
  ASSERT_NE(graph_.Find("proto0"), nullptr);
  EXPECT_EQ(graph_.Find("proto0")->exporters.size(), 1u);
  graph_.Release("proto0", "e0");
  EXPECT_EQ(graph_.Find("proto0"), nullptr);
  EXPECT_TRUE(graph_.entries().empty());
}

TEST_F(GraphTest, NestedInlineChildrenCloseTogether) {
  BlockdevOptions middle = RawOver(Inline(FileNodeOptions(image_)), "", false,
                                   RawOptions{.offset = kMiB, .size = 2 * kMiB});
  ASSERT_TRUE(
      graph_.Add(RawOver(Inline(middle), "part0", false, RawOptions{.offset = 4096, .size = 8192}))
          .ok());
  EXPECT_EQ(graph_.entries().size(), 3u);
  EXPECT_EQ(graph_.Find("part0")->node->size(), 8192u);
  ASSERT_TRUE(graph_.Delete("part0").ok());
  EXPECT_TRUE(graph_.entries().empty());
}

}  // namespace
}  // namespace bexd::block
