// SPDX-License-Identifier: GPL-2.0-or-later
// INIT negotiation, DESTROY, STATFS, attributes and the opcodes answered without I/O.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "block/open.h"
#include "tests/fuse/core_harness.h"

namespace bexd::fuse::testing {
namespace {

constexpr uint64_t kNullSize = (8 << 20) + 100;

block::BlockdevOptions NullNode(bool read_only = false) {
  block::BlockdevOptions options;
  options.node_name = "null0";
  options.read_only = read_only;
  options.driver = block::NullOptions{kNullSize, /*read_zeroes=*/true, 0};
  return options;
}

SessionOptions Options(bool writable) {
  SessionOptions options;
  options.writable = writable;
  return options;
}

fuse_attr Getattr(CoreHarness& harness, uint64_t node_id = 1) {
  fuse_getattr_in in{};
  Reply reply = harness.Run(RequestBytes(FUSE_GETATTR, node_id).Append(in).Finish());
  EXPECT_EQ(reply.header().error, 0);
  return reply.payload<fuse_attr_out>().attr;
}

TEST(InitTest, NewerMajorGetsOurVersionOnly) {
  CoreHarness harness(NullNode(), Options(true));
  Reply reply = harness.Run(InitRequest(8, 0));
  ASSERT_EQ(reply.result, sizeof(fuse_out_header) + 8);
  EXPECT_EQ(reply.header().error, 0);
  const std::vector<uint8_t> data = reply.data();
  uint32_t version[2];
  std::memcpy(version, data.data(), sizeof(version));
  EXPECT_EQ(version[0], 7u);
  EXPECT_EQ(version[1], 38u);
  EXPECT_FALSE(harness.session().initialized());  // the kernel sends INIT again
  harness.Init();
}

TEST(InitTest, OldProtocolsAreRefused) {
  CoreHarness harness(NullNode(), Options(true));
  ::testing::internal::CaptureStderr();
  Reply reply = harness.Run(InitRequest(6, 99));
  EXPECT_EQ(reply.error(), EPROTO);
  for (int i = 0; i < 3; ++i) {
    reply = harness.Run(InitRequest(7, 22));
    EXPECT_EQ(reply.error(), EPROTO);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(harness.session().initialized());
  // The refusals share one rate-limited log site (log_flood_test.cc floods it), which other
  // tests in this binary may have used up: every line that shows names the refused protocol.
  for (size_t at = log.find("FUSE INIT: kernel protocol"); at != std::string::npos;
       at = log.find("FUSE INIT: kernel protocol", at + 1)) {
    const std::string line = log.substr(at, log.find('\n', at) - at);
    EXPECT_TRUE(line.find("6.99 is older than 7.23") != std::string::npos ||
                line.find("7.22 is older than 7.23") != std::string::npos)
        << line;
  }
}

TEST(InitTest, OlderMinorIsEchoedAndOnlyOfferedFlagsAccepted) {
  CoreHarness harness(NullNode(), Options(true));
  // A 7.31 kernel sends the 16-byte fuse_init_in and knows no flags2.
  fuse_init_in in{};
  in.major = 7;
  in.minor = 31;
  in.max_readahead = 65536;
  in.flags = FUSE_ASYNC_READ | FUSE_POSIX_LOCKS | FUSE_MAX_PAGES;
  Reply reply = harness.Run(RequestBytes(FUSE_INIT, 0).AppendBytes(&in, 16).Finish());
  ASSERT_EQ(reply.header().error, 0);
  auto out = reply.payload<fuse_init_out>();
  EXPECT_EQ(out.minor, 31u);
  EXPECT_EQ(out.flags, uint32_t{FUSE_ASYNC_READ | FUSE_MAX_PAGES});
  EXPECT_EQ(out.flags2, 0u);
  EXPECT_EQ(out.max_readahead, 65536u);
  EXPECT_EQ(harness.session().protocol_minor(), 31u);
}

TEST(InitTest, NewerMinorIsAnsweredWithOurs) {
  CoreHarness harness(NullNode(), Options(true));
  Reply reply = harness.Run(InitRequest(7, 44));
  EXPECT_EQ(reply.payload<fuse_init_out>().minor, 38u);
}

TEST(InitTest, MaxWriteOptionSetsMaxPages) {
  SessionOptions options = Options(true);
  options.max_write = 128 * 1024;
  CoreHarness harness(NullNode(), options);
  Reply reply = harness.Run(InitRequest());
  EXPECT_EQ(reply.payload<fuse_init_out>().max_write, 128u * 1024);
  EXPECT_EQ(reply.payload<fuse_init_out>().max_pages, 32);
  EXPECT_EQ(harness.Run(ReadRequest(1, 0, 128 * 1024 + 4096)).error(), EINVAL);
}

TEST(InitTest, DestroyEndsTheSessionAndInitStartsAFreshOne) {
  CoreHarness harness(NullNode(), Options(true));
  harness.Init();
  fuse_open_in open{O_RDWR, 0};
  ASSERT_EQ(harness.Run(RequestBytes(FUSE_OPEN, 1).Append(open).Finish()).header().error, 0);
  EXPECT_EQ(harness.session().open_handles(), 1u);
  Reply reply = harness.Run(RequestBytes(FUSE_DESTROY, 1).Finish());
  EXPECT_EQ(reply.result, sizeof(fuse_out_header));
  EXPECT_EQ(reply.header().error, 0);
  EXPECT_FALSE(harness.session().initialized());
  EXPECT_EQ(harness.session().open_handles(), 0u);
  EXPECT_EQ(harness.Run(ReadRequest(1, 0, 512)).error(), EIO);
  harness.Init();
  EXPECT_EQ(harness.Run(ReadRequest(1, 0, 512)).header().error, 0);
}

TEST(SessionOptionsTest, ContradictionsAreRefused) {
  auto read_only = block::OpenBlockNode(NullNode(/*read_only=*/true));
  ASSERT_TRUE(read_only.ok());
  EXPECT_FALSE(Session::Create(*read_only, Options(true)).ok());
  EXPECT_TRUE(Session::Create(*read_only, Options(false)).ok());
  auto node = block::OpenBlockNode(NullNode());
  ASSERT_TRUE(node.ok());
  // QSD takes growable on a read-only export, where it changes nothing.
  SessionOptions options = Options(false);
  options.growable = true;
  absl::StatusOr<std::shared_ptr<Session>> read_only_growable = Session::Create(*node, options);
  ASSERT_TRUE(read_only_growable.ok()) << read_only_growable.status();
  EXPECT_FALSE((*read_only_growable)->options().growable);
  // Growable needs a node that can change size: the null driver cannot.
  options = Options(true);
  options.growable = true;
  absl::StatusOr<std::shared_ptr<Session>> growable = Session::Create(*node, options);
  EXPECT_EQ(growable.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(growable.status().message().find("growable export of a node that cannot be resized"),
            std::string_view::npos)
      << growable.status();
  for (uint32_t max_write : {0u, 4095u, 6000u, (2u << 20)}) {
    options = Options(true);
    options.max_write = max_write;
    EXPECT_FALSE(Session::Create(*node, options).ok()) << max_write;
  }
  options = Options(true);
  options.file_mode = 0100644;
  EXPECT_FALSE(Session::Create(*node, options).ok());
  EXPECT_FALSE(Session::Create(nullptr, Options(true)).ok());
}

TEST(AttributeTest, PresentedOwnerModeAndTimes) {
  SessionOptions options = Options(false);
  options.uid = 1234;
  options.gid = 5678;
  options.file_mode = 0444;
  options.timestamp = timespec{1700000000, 42};
  CoreHarness harness(NullNode(), options);
  harness.Init();
  fuse_attr attr = Getattr(harness);
  EXPECT_EQ(attr.uid, 1234u);
  EXPECT_EQ(attr.gid, 5678u);
  EXPECT_EQ(attr.mode, S_IFREG | 0444u);
  EXPECT_EQ(attr.mtime, 1700000000u);
  EXPECT_EQ(attr.mtimensec, 42u);
  EXPECT_EQ(attr.atime, 1700000000u);
  EXPECT_EQ(attr.ctime, 1700000000u);
  EXPECT_EQ(attr.size, kNullSize);
  EXPECT_EQ(attr.blocks, (kNullSize + 511) / 512);
}

TEST(AttributeTest, SetattrChangesModeOwnerAndTimesButNotTheFileType) {
  CoreHarness harness(NullNode(), Options(true));
  harness.Init();
  fuse_setattr_in in{};
  in.valid = FATTR_MODE | FATTR_UID | FATTR_GID | FATTR_ATIME | FATTR_MTIME;
  in.mode = S_IFDIR | 04640;
  in.uid = 11;
  in.gid = 22;
  in.atime = 1000;
  in.atimensec = 1;
  in.mtime = 2000;
  in.mtimensec = 2;
  Reply reply = harness.Run(RequestBytes(FUSE_SETATTR, 1).Append(in).Finish());
  ASSERT_EQ(reply.header().error, 0);
  fuse_attr replied = reply.payload<fuse_attr_out>().attr;
  EXPECT_EQ(replied.mode, S_IFREG | 04640u);
  fuse_attr attr = Getattr(harness);
  EXPECT_EQ(attr.mode, S_IFREG | 04640u);
  EXPECT_EQ(attr.uid, 11u);
  EXPECT_EQ(attr.gid, 22u);
  EXPECT_EQ(attr.atime, 1000u);
  EXPECT_EQ(attr.atimensec, 1u);
  EXPECT_EQ(attr.mtime, 2000u);
  EXPECT_EQ(attr.mtimensec, 2u);
  EXPECT_GT(attr.ctime, 2000u);  // a status change happened now

  in = {};
  in.valid = FATTR_MTIME | FATTR_MTIME_NOW;
  reply = harness.Run(RequestBytes(FUSE_SETATTR, 1).Append(in).Finish());
  EXPECT_GT(reply.payload<fuse_attr_out>().attr.mtime, 2000u);

  // Out-of-range nanoseconds change nothing.
  in = {};
  in.valid = FATTR_UID | FATTR_ATIME;
  in.uid = 99;
  in.atimensec = 1000000000;
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_SETATTR, 1).Append(in).Finish()).error(), EINVAL);
  EXPECT_EQ(Getattr(harness).uid, 11u);
}

// A mount without allow_other: only the owner's bits may be set (QSD answers EPERM too).
TEST(AttributeTest, OwnerOnlySessionRefusesBitsForOthers) {
  CoreHarness harness(NullNode(), Options(true));
  harness.session().RestrictToOwner();
  harness.Init();
  fuse_setattr_in in{};
  in.valid = FATTR_MODE;
  in.mode = S_IFREG | 0444;
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_SETATTR, 1).Append(in).Finish()).error(), EPERM);
  in.mode = S_IFREG | 0601;
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_SETATTR, 1).Append(in).Finish()).error(), EPERM);
  EXPECT_EQ(Getattr(harness).mode, S_IFREG | 0600u);
  in.mode = S_IFREG | 0700;
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_SETATTR, 1).Append(in).Finish()).header().error, 0);
  EXPECT_EQ(Getattr(harness).mode, S_IFREG | 0700u);
}

TEST(AttributeTest, ReadOnlyExportRefusesChanges) {
  CoreHarness harness(NullNode(true), Options(false));
  harness.Init();
  fuse_setattr_in in{};
  in.valid = FATTR_MODE;
  in.mode = 0777;
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_SETATTR, 1).Append(in).Finish()).error(), EROFS);
  in.valid = FATTR_SIZE;
  in.size = 4096;
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_SETATTR, 1).Append(in).Finish()).error(), EROFS);
  // Setting the size it already has (O_TRUNC-free shells do this) is no change.
  in.size = kNullSize;
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_SETATTR, 1).Append(in).Finish()).header().error, 0);
  EXPECT_EQ(Getattr(harness).mode, S_IFREG | 0400u);
}

TEST(ReadOnlyTest, WritesAreRefused) {
  CoreHarness harness(NullNode(true), Options(false));
  harness.Init();
  fuse_open_in open{O_RDWR, 0};
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_OPEN, 1).Append(open).Finish()).error(), EROFS);
  open.flags = O_WRONLY;
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_OPEN, 1).Append(open).Finish()).error(), EROFS);
  EXPECT_EQ(harness.session().open_handles(), 0u);
  open.flags = O_RDONLY;
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_OPEN, 1).Append(open).Finish()).header().error, 0);
  EXPECT_EQ(harness.Run(WriteRequest(1, 0, std::vector<uint8_t>(512, 1))).error(), EROFS);
  fuse_fallocate_in fallocate{1, 0, 4096, 0, 0};
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_FALLOCATE, 1).Append(fallocate).Finish()).error(), EROFS);
  // fsync on a read-only export has nothing to flush and succeeds.
  fuse_fsync_in fsync{};
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_FSYNC, 1).Append(fsync).Finish()).header().error, 0);
  EXPECT_EQ(harness.Run(ReadRequest(1, 0, 512)).header().error, 0);
}

TEST(SessionOpsTest, StatfsDescribesTheNode) {
  CoreHarness harness(NullNode(), Options(true));
  harness.Init();
  Reply reply = harness.Run(RequestBytes(FUSE_STATFS, 1).Finish());
  ASSERT_EQ(reply.result, sizeof(fuse_out_header) + sizeof(fuse_statfs_out));
  auto out = reply.payload<fuse_statfs_out>();
  EXPECT_EQ(out.st.bsize, 4096u);
  EXPECT_EQ(out.st.blocks, (kNullSize + 4095) / 4096);
  EXPECT_EQ(out.st.namelen, 255u);
}

TEST(SessionOpsTest, UnsupportedOpcodesSayEnosysSoTheKernelStopsAsking) {
  CoreHarness harness(NullNode(), Options(true));
  harness.Init();
  fuse_access_in access{4, 0};
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_ACCESS, 1).Append(access).Finish()).error(), ENOSYS);
  fuse_getxattr_in getxattr{64, 0};
  EXPECT_EQ(harness
                .Run(RequestBytes(FUSE_GETXATTR, 1)
                         .Append(getxattr)
                         .AppendString("security.capability")
                         .Finish())
                .error(),
            ENOSYS);
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_LISTXATTR, 1).Append(getxattr).Finish()).error(), ENOSYS);
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_SETXATTR, 1).Finish()).error(), ENOSYS);
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_REMOVEXATTR, 1).AppendString("user.x").Finish()).error(),
            ENOSYS);
  for (uint32_t opcode :
       {FUSE_GETLK, FUSE_SETLK, FUSE_SETLKW, FUSE_BMAP, FUSE_IOCTL, FUSE_POLL, FUSE_FSYNCDIR,
        FUSE_COPY_FILE_RANGE, FUSE_SYNCFS, FUSE_SETUPMAPPING, FUSE_REMOVEMAPPING}) {
    SCOPED_TRACE(opcode);
    EXPECT_EQ(harness.Run(RequestBytes(opcode, 1).Finish()).error(), ENOSYS);
  }
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_READLINK, 1).Finish()).error(), EINVAL);
  // NOTIFY_REPLY answers a retrieve; it takes no reply.
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_NOTIFY_REPLY, 1).Finish()).result, 0);
}

TEST(SessionOpsTest, ReleaseOfAnUnknownHandleIsEbadfAndCountsNothing) {
  CoreHarness harness(NullNode(), Options(true));
  harness.Init();
  fuse_release_in release{};
  release.fh = 12345;
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_RELEASE, 1).Append(release).Finish()).error(), EBADF);
  release.fh = 1;
  // More RELEASEs than OPENs never wrap the count.
  EXPECT_EQ(harness.Run(RequestBytes(FUSE_RELEASE, 1).Append(release).Finish()).header().error, 0);
  EXPECT_EQ(harness.session().open_handles(), 0u);
}

}  // namespace
}  // namespace bexd::fuse::testing
