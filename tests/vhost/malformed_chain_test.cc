// SPDX-License-Identifier: GPL-2.0-or-later
// A hostile guest's descriptor chains: each must break only its own ring (signalled on the ring's
// error eventfd), leave the other rings serving, and leave the export able to serve the next
// frontend. Nothing may crash or touch memory outside the guest's regions.
#include <linux/fuse.h>

#include <cstring>
#include <functional>

#include "export/vhost_user/virtqueue.h"
#include "tests/vhost/export_fixture.h"

namespace bexd::test::vhost {
namespace {

namespace vring = exports::vring;
using RawDesc = Frontend::RawDesc;

// Descriptor indices the frontend's request slots do not use while one request at a time runs.
constexpr uint16_t kFree = 100;

class MalformedChainTest : public VhostExportTest {
 protected:
  // Injects a malformed chain on ring 1 and checks the outcome described above.
  void ExpectRingBroken(const std::function<void(Frontend&)>& inject, bool indirect = true) {
    StartExport(2);
    FrontendOptions options = Options(2);
    options.indirect = indirect;
    std::unique_ptr<Frontend> frontend = ConnectAndInit(options);
    ASSERT_NE(frontend, nullptr);
    ASSERT_EQ(LookupImage(*frontend), 2u);

    inject(*frontend);
    EXPECT_TRUE(frontend->WaitRingError(1)) << "ring 1 was not reported broken";
    // The other request queue still serves, and the broken ring can still be stopped.
    EXPECT_EQ(LookupImage(*frontend, 2), 2u);
    EXPECT_TRUE(frontend->GetVringBase(1).ok());

    frontend->Drop();
    std::unique_ptr<Frontend> next = ConnectAndInit(options);
    ASSERT_NE(next, nullptr);
    EXPECT_EQ(LookupImage(*next, 1), 2u);
  }

  // A LOOKUP request for the image in scratch memory: header + name, `in` bytes at `gpa`.
  static uint32_t WriteLookup(Frontend& frontend, uint64_t gpa) {
    const char name[] = "disk0";
    struct fuse_in_header header = {};
    header.len = sizeof(header) + sizeof(name);
    header.opcode = FUSE_LOOKUP;
    header.unique = 999;
    header.nodeid = FUSE_ROOT_ID;
    memcpy(frontend.GuestPtr(gpa), &header, sizeof(header));
    memcpy(frontend.GuestPtr(gpa) + sizeof(header), name, sizeof(name));
    return header.len;
  }
};

TEST_F(MalformedChainTest, LoopInRingTable) {
  ExpectRingBroken([](Frontend& f) {
    uint64_t gpa = f.ScratchGpa();
    f.WriteDesc(1, kFree, {gpa, 16, vring::kDescNext, kFree + 1});
    f.WriteDesc(1, kFree + 1, {gpa, 16, vring::kDescNext, kFree});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, DescriptorPointsAtItself) {
  ExpectRingBroken([](Frontend& f) {
    f.WriteDesc(1, kFree, {f.ScratchGpa(), 16, vring::kDescNext, kFree});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, BufferPastTheEndOfMemory) {
  ExpectRingBroken([](Frontend& f) {
    f.WriteDesc(1, kFree, {f.memory_bytes() - 8, 64, 0, 0});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, BufferAddressWrapsAround) {
  ExpectRingBroken([](Frontend& f) {
    f.WriteDesc(1, kFree, {~uint64_t{0} - 0x10, 0x100, 0, 0});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, HugeLength) {
  ExpectRingBroken([](Frontend& f) {
    f.WriteDesc(1, kFree, {f.ScratchGpa(), 0xffffffff, vring::kDescWrite, 0});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, HeadIndexPastQueueSize) {
  ExpectRingBroken([](Frontend& f) { f.PublishHead(1, 500); });
}

TEST_F(MalformedChainTest, NextIndexPastQueueSize) {
  ExpectRingBroken([](Frontend& f) {
    f.WriteDesc(1, kFree, {f.ScratchGpa(), 64, vring::kDescNext, 300});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, AvailIndexJump) {
  ExpectRingBroken([](Frontend& f) {
    uint32_t len = WriteLookup(f, f.ScratchGpa());
    f.WriteDesc(1, kFree, {f.ScratchGpa(), len, 0, 0});
    f.PublishHead(1, kFree, 1000);
  });
}

// A ring restarted at a base past the available index: the entries between are stale, never
// published by the guest, and none of them may be served.
TEST_F(MalformedChainTest, BasePastTheAvailableIndexServesNoStaleEntry) {
  StartExport(2);
  std::unique_ptr<Frontend> frontend = ConnectAndInit(Options(2));
  ASSERT_NE(frontend, nullptr);
  ASSERT_TRUE(frontend->GetVringBase(1).ok());
  const uint64_t gpa = frontend->ScratchGpa();
  const uint32_t len = WriteLookup(*frontend, gpa);
  frontend->WriteDesc(1, kFree, {gpa, len, vring::kDescNext, kFree + 1});
  frontend->WriteDesc(1, kFree + 1, {gpa + 4096, 256, vring::kDescWrite, 0});
  constexpr uint16_t kAhead = 10;
  for (uint16_t i = 0; i < kAhead; ++i) frontend->WriteAvailEntry(1, i, kFree);
  const uint16_t used_before = frontend->used_idx(1);
  ASSERT_TRUE(frontend->StartRing(1, kAhead).ok());
  frontend->Kick(1);
  EXPECT_TRUE(frontend->WaitRingError(1)) << "ring 1 was not reported broken";
  EXPECT_EQ(frontend->used_idx(1), used_before) << "stale entries were served";
  EXPECT_EQ(LookupImage(*frontend, 2), 2u);
}

TEST_F(MalformedChainTest, ReadableAfterWritable) {
  ExpectRingBroken([](Frontend& f) {
    uint64_t gpa = f.ScratchGpa();
    f.WriteDesc(1, kFree, {gpa + 4096, 256, vring::kDescWrite | vring::kDescNext, kFree + 1});
    f.WriteDesc(1, kFree + 1, {gpa, 64, 0, 0});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, NotAFuseRequest) {
  ExpectRingBroken([](Frontend& f) {
    // Eight readable bytes cannot hold a fuse_in_header.
    f.WriteDesc(1, kFree, {f.ScratchGpa(), 8, 0, 0});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, IndirectWithoutTheFeature) {
  ExpectRingBroken(
      [](Frontend& f) {
        f.WriteDesc(1, kFree, {f.ScratchGpa(), 32, vring::kDescIndirect, 0});
        f.PublishHead(1, kFree);
      },
      /*indirect=*/false);
}

TEST_F(MalformedChainTest, IndirectTableSizeNotMultipleOf16) {
  ExpectRingBroken([](Frontend& f) {
    f.WriteDesc(1, kFree, {f.ScratchGpa(), 20, vring::kDescIndirect, 0});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, IndirectTableOutsideMemory) {
  ExpectRingBroken([](Frontend& f) {
    f.WriteDesc(1, kFree, {f.memory_bytes() - 16, 64, vring::kDescIndirect, 0});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, NestedIndirectTable) {
  ExpectRingBroken([](Frontend& f) {
    uint64_t table = f.ScratchGpa();
    RawDesc inner = {table + 256, 16, vring::kDescIndirect, 0};
    memcpy(f.GuestPtr(table), &inner, sizeof(inner));
    f.WriteDesc(1, kFree, {table, 16, vring::kDescIndirect, 0});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, IndirectWithNext) {
  ExpectRingBroken([](Frontend& f) {
    uint64_t gpa = f.ScratchGpa();
    uint32_t len = WriteLookup(f, gpa + 4096);
    RawDesc entry = {gpa + 4096, len, 0, 0};
    memcpy(f.GuestPtr(gpa), &entry, sizeof(entry));
    f.WriteDesc(1, kFree, {gpa, 16, vring::kDescIndirect | vring::kDescNext, kFree + 1});
    f.WriteDesc(1, kFree + 1, {gpa + 8192, 256, vring::kDescWrite, 0});
    f.PublishHead(1, kFree);
  });
}

TEST_F(MalformedChainTest, LoopInIndirectTable) {
  ExpectRingBroken([](Frontend& f) {
    uint64_t table = f.ScratchGpa();
    RawDesc entries[2] = {{table + 4096, 16, vring::kDescNext, 1},
                          {table + 4096, 16, vring::kDescNext, 0}};
    memcpy(f.GuestPtr(table), entries, sizeof(entries));
    f.WriteDesc(1, kFree, {table, sizeof(entries), vring::kDescIndirect, 0});
    f.PublishHead(1, kFree);
  });
}

// Not malformed: a request whose buffers cross the boundary between two memory regions is split
// into two iovecs and served normally.
TEST_F(VhostExportTest, BuffersCrossingRegionBoundary) {
  StartExport(1);
  FrontendOptions options = Options();
  options.two_regions = true;
  std::unique_ptr<Frontend> frontend = ConnectAndInit(options);
  ASSERT_NE(frontend, nullptr);
  uint64_t node = LookupImage(*frontend);
  uint64_t fh = OpenImage(*frontend, node);

  // The scratch area straddles the region boundary at memory_bytes() / 2.
  const uint64_t boundary = frontend->memory_bytes() / 2;
  const uint64_t in_gpa = boundary - 40;  // the header and the read arguments cross it
  const uint64_t out_gpa = boundary - 3000;
  constexpr uint32_t kSize = 8192;
  struct fuse_in_header header = {};
  header.len = sizeof(header) + sizeof(fuse_read_in);
  header.opcode = FUSE_READ;
  header.unique = 77;
  header.nodeid = node;
  struct fuse_read_in read = {};
  read.fh = fh;
  read.offset = 40960;
  read.size = kSize;
  memcpy(frontend->GuestPtr(in_gpa), &header, sizeof(header));
  memcpy(frontend->GuestPtr(in_gpa) + sizeof(header), &read, sizeof(read));
  frontend->WriteDesc(1, kFree, {in_gpa, header.len, vring::kDescNext, kFree + 1});
  frontend->WriteDesc(1, kFree + 1,
                      {out_gpa, sizeof(fuse_out_header) + kSize, vring::kDescWrite, 0});
  uint16_t before = frontend->used_idx(1);
  frontend->PublishHead(1, kFree);
  ASSERT_TRUE(frontend->WaitUsedIdx(1, static_cast<uint16_t>(before + 1)));
  struct fuse_out_header out = {};
  memcpy(&out, frontend->GuestPtr(out_gpa), sizeof(out));
  EXPECT_EQ(out.error, 0);
  EXPECT_EQ(out.unique, 77u);
  EXPECT_EQ(out.len, sizeof(out) + kSize);
  EXPECT_EQ(memcmp(frontend->GuestPtr(out_gpa + sizeof(out)), pattern_.data() + 40960, kSize), 0);
}

}  // namespace
}  // namespace bexd::test::vhost
