// SPDX-License-Identifier: GPL-2.0-or-later
// The virtio-fs layout: node 1 is a directory holding the one file, node 2.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "block/open.h"
#include "tests/fuse/core_harness.h"

namespace bexd::fuse::testing {
namespace {

constexpr uint64_t kNullSize = 8 << 20;
constexpr uint64_t kFile = 2;

block::BlockdevOptions NullNode() {
  block::BlockdevOptions options;
  options.node_name = "null0";
  options.driver = block::NullOptions{kNullSize, /*read_zeroes=*/true, 0};
  return options;
}

SessionOptions DirectoryRoot() {
  SessionOptions options;
  options.writable = true;
  options.directory_root = true;
  options.file_name = "disk.img";
  return options;
}

struct Entry {
  uint64_t ino;
  uint64_t off;
  uint32_t type;
  std::string name;
  uint64_t node_id;  // READDIRPLUS only
};

std::vector<Entry> ParseDirents(const std::vector<uint8_t>& data, bool plus) {
  std::vector<Entry> entries;
  size_t at = 0;
  const size_t head = plus ? sizeof(fuse_direntplus) : sizeof(fuse_dirent);
  while (at + head <= data.size()) {
    Entry entry{};
    fuse_dirent dirent;
    if (plus) {
      fuse_entry_out entry_out;
      std::memcpy(&entry_out, data.data() + at, sizeof(entry_out));
      entry.node_id = entry_out.nodeid;
      std::memcpy(&dirent, data.data() + at + sizeof(entry_out), sizeof(dirent));
    } else {
      std::memcpy(&dirent, data.data() + at, sizeof(dirent));
    }
    entry.ino = dirent.ino;
    entry.off = dirent.off;
    entry.type = dirent.type;
    const size_t name_at = at + head;
    if (name_at + dirent.namelen > data.size()) {
      ADD_FAILURE() << "dirent name runs past the reply";
      break;
    }
    entry.name.assign(reinterpret_cast<const char*>(data.data() + name_at), dirent.namelen);
    entries.push_back(entry);
    at += (head + dirent.namelen + 7) & ~size_t{7};
  }
  EXPECT_EQ(at, data.size());
  return entries;
}

class DirectoryTest : public ::testing::Test {
 protected:
  DirectoryTest() : harness_(NullNode(), DirectoryRoot()) { harness_.Init(); }

  Reply Readdir(uint32_t opcode, uint64_t offset, uint32_t size, uint64_t node_id = 1) {
    fuse_read_in in{};
    in.fh = 2;
    in.offset = offset;
    in.size = size;
    return harness_.Run(RequestBytes(opcode, node_id).Append(in).Finish());
  }

  CoreHarness harness_;
};

TEST_F(DirectoryTest, InitAllowsParallelDirectoryOperationsAndReaddirplus) {
  Reply reply = harness_.Run(InitRequest());
  auto out = reply.payload<fuse_init_out>();
  EXPECT_TRUE(out.flags & FUSE_PARALLEL_DIROPS);
  EXPECT_TRUE(out.flags & FUSE_DO_READDIRPLUS);
}

TEST_F(DirectoryTest, RootIsADirectory) {
  fuse_getattr_in in{};
  Reply reply = harness_.Run(RequestBytes(FUSE_GETATTR, 1).Append(in).Finish());
  ASSERT_EQ(reply.header().error, 0);
  auto out = reply.payload<fuse_attr_out>();
  EXPECT_TRUE(S_ISDIR(out.attr.mode));
  EXPECT_EQ(out.attr.mode & 07777, 0500u);  // searchable by whoever may read the 0600 file
  EXPECT_EQ(out.attr.nlink, 2u);
  EXPECT_EQ(out.attr.ino, 1u);
}

TEST_F(DirectoryTest, LookupFindsOnlyTheFile) {
  Reply reply = harness_.Run(RequestBytes(FUSE_LOOKUP, 1).AppendString("disk.img").Finish());
  ASSERT_EQ(reply.result, sizeof(fuse_out_header) + sizeof(fuse_entry_out));
  ASSERT_EQ(reply.header().error, 0);
  auto out = reply.payload<fuse_entry_out>();
  EXPECT_EQ(out.nodeid, kFile);
  EXPECT_EQ(out.attr.ino, kFile);
  EXPECT_EQ(out.attr.size, kNullSize);
  EXPECT_TRUE(S_ISREG(out.attr.mode));
  EXPECT_GT(out.entry_valid + out.entry_valid_nsec, 0u);

  for (const char* name : {"other", "disk.im", "disk.img2", "", "."}) {
    SCOPED_TRACE(name);
    reply = harness_.Run(RequestBytes(FUSE_LOOKUP, 1).AppendString(name).Finish());
    EXPECT_EQ(reply.error(), ENOENT);
  }
  reply = harness_.Run(RequestBytes(FUSE_LOOKUP, 1).AppendString(std::string(300, 'x')).Finish());
  EXPECT_EQ(reply.error(), ENAMETOOLONG);
  // Not NUL-terminated, an embedded NUL, no name at all.
  reply = harness_.Run(RequestBytes(FUSE_LOOKUP, 1).AppendBytes("disk.img", 8).Finish());
  EXPECT_EQ(reply.error(), EINVAL);
  reply = harness_.Run(RequestBytes(FUSE_LOOKUP, 1).AppendBytes("disk\0img", 9).Finish());
  EXPECT_EQ(reply.error(), EINVAL);
  reply = harness_.Run(RequestBytes(FUSE_LOOKUP, 1).Finish());
  EXPECT_EQ(reply.error(), EINVAL);
  // The file is no directory, and unknown nodes are unknown.
  reply = harness_.Run(RequestBytes(FUSE_LOOKUP, kFile).AppendString("disk.img").Finish());
  EXPECT_EQ(reply.error(), ENOTDIR);
  reply = harness_.Run(RequestBytes(FUSE_LOOKUP, 3).AppendString("disk.img").Finish());
  EXPECT_EQ(reply.error(), ENOENT);
}

TEST_F(DirectoryTest, ReaddirListsDotDotDotAndTheFile) {
  for (uint32_t opcode : {uint32_t{FUSE_READDIR}, uint32_t{FUSE_READDIRPLUS}}) {
    SCOPED_TRACE(opcode);
    const bool plus = opcode == FUSE_READDIRPLUS;
    Reply reply = Readdir(opcode, 0, 4096);
    ASSERT_EQ(reply.header().error, 0);
    std::vector<Entry> entries = ParseDirents(reply.data(), plus);
    ASSERT_EQ(entries.size(), 3u);
    EXPECT_EQ(entries[0].name, ".");
    EXPECT_EQ(entries[1].name, "..");
    EXPECT_EQ(entries[2].name, "disk.img");
    EXPECT_EQ(entries[0].type, DT_DIR);
    EXPECT_EQ(entries[2].type, DT_REG);
    EXPECT_EQ(entries[2].ino, kFile);
    for (size_t i = 0; i < entries.size(); ++i) EXPECT_EQ(entries[i].off, i + 1);
    if (plus) {
      EXPECT_EQ(entries[0].node_id, 0u);
      EXPECT_EQ(entries[2].node_id, kFile);
    }
    // Continuing from an entry's offset lists the rest; past the end lists nothing.
    reply = Readdir(opcode, 2, 4096);
    entries = ParseDirents(reply.data(), plus);
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].name, "disk.img");
    reply = Readdir(opcode, 3, 4096);
    EXPECT_EQ(reply.header().error, 0);
    EXPECT_TRUE(reply.data().empty());
    reply = Readdir(opcode, UINT64_MAX, 4096);
    EXPECT_TRUE(reply.data().empty());
    // A buffer for one record gets one record.
    const uint32_t one = plus ? sizeof(fuse_direntplus) + 8 : sizeof(fuse_dirent) + 8;
    reply = Readdir(opcode, 0, one);
    entries = ParseDirents(reply.data(), plus);
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].name, ".");
    reply = Readdir(opcode, 0, 4);
    EXPECT_TRUE(reply.data().empty());
  }
}

TEST_F(DirectoryTest, DirectoryHandlesAndKindMismatches) {
  fuse_open_in open{O_RDONLY, 0};
  Reply reply = harness_.Run(RequestBytes(FUSE_OPENDIR, 1).Append(open).Finish());
  ASSERT_EQ(reply.header().error, 0);
  EXPECT_TRUE(reply.payload<fuse_open_out>().open_flags & FOPEN_CACHE_DIR);
  fuse_release_in release{};
  reply = harness_.Run(RequestBytes(FUSE_RELEASEDIR, 1).Append(release).Finish());
  EXPECT_EQ(reply.result, sizeof(fuse_out_header));
  EXPECT_EQ(reply.header().error, 0);
  EXPECT_EQ(harness_.session().open_handles(), 0u);  // directories do not make an export busy

  reply = harness_.Run(RequestBytes(FUSE_OPENDIR, kFile).Append(open).Finish());
  EXPECT_EQ(reply.error(), ENOTDIR);
  reply = Readdir(FUSE_READDIR, 0, 4096, kFile);
  EXPECT_EQ(reply.error(), ENOTDIR);
  reply = harness_.Run(RequestBytes(FUSE_OPEN, 1).Append(open).Finish());
  EXPECT_EQ(reply.error(), EISDIR);
  reply = harness_.Run(ReadRequest(1, 0, 4096));
  EXPECT_EQ(reply.error(), EISDIR);
  fuse_setattr_in setattr{};
  setattr.valid = FATTR_SIZE;
  reply = harness_.Run(RequestBytes(FUSE_SETATTR, 1).Append(setattr).Finish());
  EXPECT_EQ(reply.error(), EISDIR);
}

TEST_F(DirectoryTest, TheFileIsNodeTwo) {
  fuse_open_in open{O_RDWR, 0};
  Reply reply = harness_.Run(RequestBytes(FUSE_OPEN, kFile).Append(open).Finish());
  ASSERT_EQ(reply.header().error, 0);
  EXPECT_EQ(harness_.session().open_handles(), 1u);
  reply = harness_.Run(ReadRequest(kFile, 0, 4096));
  EXPECT_EQ(reply.data(), std::vector<uint8_t>(4096, 0));
  reply = harness_.Run(WriteRequest(kFile, 0, std::vector<uint8_t>(512, 3)));
  EXPECT_EQ(reply.payload<fuse_write_out>().size, 512u);
}

TEST_F(DirectoryTest, NamespaceChangesAreRefused) {
  fuse_mkdir_in mkdir{0755, 0};
  Reply reply = harness_.Run(RequestBytes(FUSE_MKDIR, 1).Append(mkdir).AppendString("d").Finish());
  EXPECT_EQ(reply.error(), EPERM);
  fuse_create_in create{O_RDWR | O_CREAT, 0644, 0, 0};
  reply = harness_.Run(RequestBytes(FUSE_CREATE, 1).Append(create).AppendString("f").Finish());
  EXPECT_EQ(reply.error(), EPERM);
  reply = harness_.Run(RequestBytes(FUSE_UNLINK, 1).AppendString("disk.img").Finish());
  EXPECT_EQ(reply.error(), EPERM);
  fuse_rename_in rename{1};
  reply = harness_.Run(RequestBytes(FUSE_RENAME, 1)
                           .Append(rename)
                           .AppendString("disk.img")
                           .AppendString("x")
                           .Finish());
  EXPECT_EQ(reply.error(), EPERM);
}

TEST(DirectoryOptionsTest, BadFileNamesAreRefused) {
  auto node = block::OpenBlockNode(NullNode());
  ASSERT_TRUE(node.ok());
  const std::string names[] = {"", ".", "..", "a/b", std::string(256, 'x'), std::string("a\0b", 3)};
  for (const std::string& name : names) {
    SessionOptions options = DirectoryRoot();
    options.file_name = name;
    EXPECT_FALSE(Session::Create(*node, options).ok()) << name;
  }
}

}  // namespace
}  // namespace bexd::fuse::testing
