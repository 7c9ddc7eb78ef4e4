// SPDX-License-Identifier: GPL-2.0-or-later
// Images bexd cannot serve or that are damaged: a clear error at open, or -EIO on the requests
// that touch the damage (and the node marked corrupt, refusing writes), never a crash.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "block/qcow2/format.h"
#include "block/qcow2/node.h"
#include "tests/block/file_fixture.h"
#include "tests/block/qcow2_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::MakeQueue;
using testing::OpenImage;
using testing::ReadAt;
using testing::RunCommand;
using testing::ScratchDir;
using testing::WriteAt;

constexpr uint64_t kMiB = 1 << 20;

uint64_t Be64At(const std::string& path, uint64_t offset) {
  return qcow2::LoadBe64(testing::ReadFile(path, offset, 8).data());
}

void PutBe64(const std::string& path, uint64_t offset, uint64_t value) {
  std::vector<unsigned char> bytes(8);
  qcow2::StoreBe64(bytes.data(), value);
  testing::WriteFile(path, bytes, offset);
}

void PutBe32(const std::string& path, uint64_t offset, uint32_t value) {
  std::vector<unsigned char> bytes(4);
  qcow2::StoreBe32(bytes.data(), value);
  testing::WriteFile(path, bytes, offset);
}

class Qcow2DamageTest : public ::testing::Test {
 protected:
  // A 4 MiB image with data in its first 2 MiB.
  std::string Image(const std::string& options = "") {
    std::string image = dir_.path() + "/image.qcow2";
    RunCommand("qemu-img create -f qcow2 " + options + " " + image + " 4M >/dev/null");
    RunCommand("qemu-io -f qcow2 -c 'write -P 0x5a 0 2M' " + image);
    return image;
  }
  uint64_t L1Offset(const std::string& image) {
    return Be64At(image, qcow2::field::kL1TableOffset);
  }

  void ExpectOpenFails(const std::string& image, bool read_only, const std::string& message) {
    auto node = OpenImage(image, read_only);
    ASSERT_FALSE(node.ok()) << "opened " << image;
    EXPECT_NE(node.status().message().find(message), std::string::npos) << node.status();
    // Every message names the node and the file.
    EXPECT_NE(node.status().message().find("node '"), std::string::npos) << node.status();
    EXPECT_NE(node.status().message().find(image), std::string::npos) << node.status();
  }

  ScratchDir dir_{"qcow2"};
};

TEST_F(Qcow2DamageTest, NotAQcow2Image) {
  std::string raw = dir_.CreateFile("disk.raw", kMiB);
  ExpectOpenFails(raw, true, "not in qcow2 format");
  ExpectOpenFails(dir_.CreateFile("empty", 0), true, "not in qcow2 format");
}

TEST_F(Qcow2DamageTest, UnsupportedVersionAndClusterSize) {
  std::string image = Image();
  PutBe32(image, qcow2::field::kVersion, 4);
  ExpectOpenFails(image, true, "unsupported qcow2 version 4");
  image = Image();
  PutBe32(image, qcow2::field::kClusterBits, 22);
  ExpectOpenFails(image, true, "unsupported cluster size 2^22");
}

TEST_F(Qcow2DamageTest, UnsupportedFeaturesAreNamed) {
  std::string image = Image();
  PutBe64(image, qcow2::field::kIncompatibleFeatures, uint64_t{1} << 40);
  ExpectOpenFails(image, true, "unsupported qcow2 feature(s): unknown incompatible feature bit 40");

  std::string data_file = dir_.path() + "/external.qcow2";
  RunCommand("qemu-img create -f qcow2 -o data_file=" + dir_.path() + "/data.raw " + data_file +
             " 1M >/dev/null");
  ExpectOpenFails(data_file, true, "unsupported qcow2 feature(s): external data file");

  // The encryption method is set in the header rather than by qemu-img's LUKS support, which
  // failed on a CI machine without saying why; the refusal depends only on the header field.
  for (auto [method, name] : {std::pair{1u, "encryption (AES)"}, std::pair{2u, "encryption (LUKS)"},
                              std::pair{7u, "encryption (method 7)"}}) {
    image = Image();
    PutBe32(image, qcow2::field::kCryptMethod, method);
    ExpectOpenFails(image, true, std::string("unsupported qcow2 feature(s): ") + name);
  }
}

TEST_F(Qcow2DamageTest, TruncatedImageFailsToOpen) {
  std::string image = Image();
  // Cut inside the L1 table (which qemu-img places after the refcount table and block).
  RunCommand("truncate -s " + std::to_string(L1Offset(image) + 4) + " " + image);
  ExpectOpenFails(image, true, "extends past the end of the image file");
}

TEST_F(Qcow2DamageTest, BadTableOffsetsFailToOpen) {
  std::string image = Image();
  PutBe64(image, qcow2::field::kL1TableOffset, L1Offset(image) + 8);
  ExpectOpenFails(image, true, "active L1 table offset");
  image = Image();
  PutBe32(image, qcow2::field::kL1Size, 0);
  ExpectOpenFails(image, true, "L1 table is too small");
}

TEST_F(Qcow2DamageTest, RefcountTableOverlappingTheHeaderRefusesWritingOnly) {
  std::string image = Image();
  PutBe64(image, qcow2::field::kRefcountTableOffset, 0);
  ExpectOpenFails(image, false, "overlaps the header");
  auto node = OpenImage(image, true);
  ASSERT_TRUE(node.ok()) << node.status();
  std::vector<unsigned char> data = testing::ReadAll(**node);
  EXPECT_EQ(data[kMiB], 0x5a);
}

TEST_F(Qcow2DamageTest, CorruptBitAllowsOnlyReading) {
  std::string image = Image();
  PutBe64(image, qcow2::field::kIncompatibleFeatures, qcow2::kIncompatCorrupt);
  ExpectOpenFails(image, false, "marked corrupt");
  auto node = OpenImage(image, true);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(testing::ReadAll(**node)[0], 0x5a);
}

TEST_F(Qcow2DamageTest, L1EntryPastTheEndFailsItsRangeAndMarksTheImageCorrupt) {
  std::string image = Image("-o cluster_size=4096");
  uint64_t l1 = L1Offset(image);
  // The second L1 entry maps 2 MiB..4 MiB with 4 KiB clusters; point it past the end.
  PutBe64(image, l1 + 8, (uint64_t{1} << 40) | qcow2::kOflagCopied);
  auto node = OpenImage(image, false);
  ASSERT_TRUE(node.ok()) << node.status();
  auto queue = MakeQueue(**node);
  std::vector<unsigned char> buffer(4096);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 4096, 0), 4096);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 4096, 3 * kMiB), -EIO);
  EXPECT_EQ(WriteAt(*queue, buffer.data(), 4096, 3 * kMiB), -EIO);
  auto* qcow2_node = static_cast<qcow2::Qcow2Node*>(node->get());
  EXPECT_TRUE(qcow2_node->corrupt());
  // Writes anywhere fail from now on; reads of intact ranges go on.
  EXPECT_EQ(WriteAt(*queue, buffer.data(), 4096, 0), -EIO);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 4096, 4096), 4096);
  EXPECT_EQ(buffer[0], 0x5a);
  queue.reset();
  node->reset();
  // Like QEMU, the corrupt bit goes into the header.
  EXPECT_NE(RunCommand("qemu-img info " + image).find("corrupt: true"), std::string::npos);
}

TEST_F(Qcow2DamageTest, L2EntryPastTheEndFailsItsClusterAndMarksTheImageCorrupt) {
  std::string image = Image();
  uint64_t l2 = Be64At(image, L1Offset(image)) & qcow2::kOffsetMask;
  // The fourth cluster (192 KiB) points past the end of the file; an unaligned one at 256 KiB.
  PutBe64(image, l2 + 3 * 8, (uint64_t{1} << 40) | qcow2::kOflagCopied);
  PutBe64(image, l2 + 4 * 8, 0x50200 | qcow2::kOflagCopied);
  auto node = OpenImage(image, true);
  ASSERT_TRUE(node.ok()) << node.status();
  auto queue = MakeQueue(**node);
  std::vector<unsigned char> buffer(65536);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 65536, 3 * 65536), -EIO);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 65536, 4 * 65536), -EIO);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 65536, 0), 65536);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 100, 2 * 65536 + 65500), -EIO);  // spans into it
  EXPECT_TRUE(static_cast<qcow2::Qcow2Node*>(node->get())->corrupt());
}

// QEMU's overlap checks: a guest write through an L2 entry that points at metadata would
// overwrite it (here the refcount table, the L1 table, another L2 table). Those entries fail
// with EIO, the image is marked corrupt, and the metadata stays as it was.
TEST_F(Qcow2DamageTest, DataClustersOnMetadataFailWithoutOverwritingIt) {
  std::string image = Image();
  const uint64_t l1 = L1Offset(image);
  const uint64_t refcount_table = Be64At(image, qcow2::field::kRefcountTableOffset);
  const uint64_t l2 = Be64At(image, l1) & qcow2::kOffsetMask;
  PutBe64(image, l2 + 1 * 8, refcount_table | qcow2::kOflagCopied);
  PutBe64(image, l2 + 2 * 8, l1 | qcow2::kOflagCopied);
  PutBe64(image, l2 + 3 * 8, l2 | qcow2::kOflagCopied);
  const std::vector<unsigned char> refcount_before = testing::ReadFile(image, refcount_table, 512);
  const std::vector<unsigned char> l1_before = testing::ReadFile(image, l1, 512);
  const std::vector<unsigned char> l2_before = testing::ReadFile(image, l2, 512);
  {
    auto node = OpenImage(image, false);
    ASSERT_TRUE(node.ok()) << node.status();
    auto queue = MakeQueue(**node);
    std::vector<unsigned char> buffer(4096, 0xee);
    for (uint64_t cluster : {1, 2, 3}) {
      EXPECT_EQ(WriteAt(*queue, buffer.data(), 4096, cluster * 65536), -EIO) << cluster;
    }
    EXPECT_TRUE(static_cast<qcow2::Qcow2Node*>(node->get())->corrupt());
    EXPECT_EQ(ReadAt(*queue, buffer.data(), 4096, 0), 4096);
    EXPECT_EQ(buffer[0], 0x5a);
  }
  EXPECT_EQ(testing::ReadFile(image, refcount_table, 512), refcount_before);
  EXPECT_EQ(testing::ReadFile(image, l1, 512), l1_before);
  EXPECT_EQ(testing::ReadFile(image, l2, 512), l2_before);
}

// A read-only node overwrites nothing: it reads such a cluster (the metadata's bytes), as QEMU.
TEST_F(Qcow2DamageTest, AReadOnlyNodeReadsDataClustersOnMetadata) {
  std::string image = Image();
  const uint64_t refcount_table = Be64At(image, qcow2::field::kRefcountTableOffset);
  const uint64_t l2 = Be64At(image, L1Offset(image)) & qcow2::kOffsetMask;
  PutBe64(image, l2 + 1 * 8, refcount_table | qcow2::kOflagCopied);
  auto node = OpenImage(image, true);
  ASSERT_TRUE(node.ok()) << node.status();
  auto queue = MakeQueue(**node);
  std::vector<unsigned char> buffer(512);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 512, 65536), 512);
  EXPECT_EQ(buffer, testing::ReadFile(image, refcount_table, 512));
  EXPECT_FALSE(static_cast<qcow2::Qcow2Node*>(node->get())->corrupt());
}

// An L1 entry that points at the refcount table: the "L2 table" would take new entries there.
TEST_F(Qcow2DamageTest, AnL2TableInThePlaceOfOtherMetadataFailsItsRange) {
  std::string image = Image();
  const uint64_t l1 = L1Offset(image);
  const uint64_t refcount_table = Be64At(image, qcow2::field::kRefcountTableOffset);
  PutBe64(image, l1, refcount_table | qcow2::kOflagCopied);
  const std::vector<unsigned char> refcount_before = testing::ReadFile(image, refcount_table, 512);
  {
    auto node = OpenImage(image, false);
    ASSERT_TRUE(node.ok()) << node.status();
    auto queue = MakeQueue(**node);
    std::vector<unsigned char> buffer(4096, 0xee);
    EXPECT_EQ(WriteAt(*queue, buffer.data(), 4096, 0), -EIO);
    EXPECT_EQ(ReadAt(*queue, buffer.data(), 4096, 0), -EIO);
    EXPECT_TRUE(static_cast<qcow2::Qcow2Node*>(node->get())->corrupt());
  }
  EXPECT_EQ(testing::ReadFile(image, refcount_table, 512), refcount_before);
}

TEST_F(Qcow2DamageTest, APartialLastSectorIsDroppedAsQemuDoes) {
  std::string image = Image();
  PutBe64(image, qcow2::field::kSize, 4 * kMiB - 100);
  auto node = OpenImage(image, true);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)->size(), 4 * kMiB - 512);
  EXPECT_NE(
      RunCommand("qemu-img info " + image).find("(" + std::to_string(4 * kMiB - 512) + " bytes)"),
      std::string::npos);
}

TEST_F(Qcow2DamageTest, BadCompressedClustersFailWithEio) {
  // Compressible data: a short pattern repeated.
  std::vector<unsigned char> data(kMiB);
  std::vector<unsigned char> unit = testing::Pattern(512, 3);
  for (uint64_t i = 0; i < kMiB; ++i) data[i] = unit[i % 512];
  std::string source = dir_.CreateFile("source.raw", kMiB);
  testing::WriteFile(source, data, 0);
  std::string image = dir_.path() + "/compressed.qcow2";
  RunCommand("qemu-img convert -c -f raw -O qcow2 " + source + " " + image);
  uint64_t l2 = Be64At(image, L1Offset(image)) & qcow2::kOffsetMask;
  ASSERT_TRUE(Be64At(image, l2) & qcow2::kOflagCompressed);
  // Cluster 0: its descriptor points into the header. Cluster 1: its bytes are garbage.
  PutBe64(image, l2, qcow2::kOflagCompressed | 0x100);
  uint64_t second = Be64At(image, l2 + 8);
  ASSERT_TRUE(second & qcow2::kOflagCompressed);
  uint64_t data_offset = second & ((uint64_t{1} << 54) - 1);
  testing::WriteFile(image, std::vector<unsigned char>(16, 0xff), data_offset);
  auto node = OpenImage(image, true);
  ASSERT_TRUE(node.ok()) << node.status();
  auto queue = MakeQueue(**node);
  std::vector<unsigned char> buffer(65536);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 65536, 0), -EIO);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 65536, 65536), -EIO);
  EXPECT_EQ(ReadAt(*queue, buffer.data(), 65536, 5 * 65536), 65536);
  EXPECT_EQ(buffer, std::vector<unsigned char>(data.begin() + 5 * 65536, data.begin() + 6 * 65536));
}

TEST_F(Qcow2DamageTest, DirtyImageIsRepairedWhenOpenedWritable) {
  std::string image = Image();
  // As if a lazy-refcounts writer died: dirty, and a refcount missing for a used cluster.
  PutBe64(image, qcow2::field::kIncompatibleFeatures, qcow2::kIncompatDirty);
  uint64_t reftable = Be64At(image, qcow2::field::kRefcountTableOffset);
  uint64_t block = Be64At(image, reftable);
  std::vector<unsigned char> zero(2, 0);
  testing::WriteFile(image, zero, block + 2 * 10);  // cluster 10 (data) now has refcount 0
  EXPECT_GT(testing::QemuCheck(image).corruptions, 0u);
  {
    auto node = OpenImage(image, false);
    ASSERT_TRUE(node.ok()) << node.status();
    EXPECT_EQ(testing::ReadAll(**node)[kMiB], 0x5a);
  }
  testing::CheckResult check = testing::QemuCheck(image);
  EXPECT_EQ(check.corruptions, 0u) << check.output;
  EXPECT_EQ(check.leaks, 0u) << check.output;
  EXPECT_EQ(Be64At(image, qcow2::field::kIncompatibleFeatures) & qcow2::kIncompatDirty, 0u);
}

TEST_F(Qcow2DamageTest, UnknownAutoclearBitsAreClearedByAWritableOpenOnly) {
  std::string image = Image();
  PutBe64(image, qcow2::field::kAutoclearFeatures, (uint64_t{1} << 7) | qcow2::kAutoclearBitmaps);
  { ASSERT_TRUE(OpenImage(image, true).ok()); }
  EXPECT_NE(Be64At(image, qcow2::field::kAutoclearFeatures), 0u);
  { ASSERT_TRUE(OpenImage(image, false).ok()); }
  EXPECT_EQ(Be64At(image, qcow2::field::kAutoclearFeatures), 0u);
  EXPECT_EQ(testing::QemuCheck(image).corruptions, 0u);
}

}  // namespace
}  // namespace bexd::block
