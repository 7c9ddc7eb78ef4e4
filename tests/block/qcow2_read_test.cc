// SPDX-License-Identifier: GPL-2.0-or-later
// Images made by qemu-img and qemu-io, read through the qcow2 driver and compared with what
// `qemu-img convert -O raw` reads from them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/block/file_fixture.h"
#include "tests/block/qcow2_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block {
namespace {

using testing::FirstDifference;
using testing::OpenImageOrFail;
using testing::QemuContents;
using testing::ReadAll;
using testing::RunCommand;
using testing::ScratchDir;

constexpr uint64_t kMiB = 1 << 20;

// A raw file with data, zeroes (which qemu-img convert leaves unallocated) and data that starts
// and ends inside clusters.
std::string MakeRawSource(const ScratchDir& dir, uint64_t size) {
  std::string path = dir.CreateFile("source.raw", size);
  for (uint64_t offset = 0; offset < size; offset += 3 * 256 * 1024) {
    testing::WriteFile(path, testing::Pattern(200 * 1024 + 777, static_cast<uint32_t>(offset)),
                       offset + 1536);
  }
  return path;
}

struct Format {
  const char* compat;  // 0.10: version 2; 1.1: version 3
  uint64_t cluster_size;
};

std::string FormatName(const ::testing::TestParamInfo<Format>& info) {
  return std::string(info.param.compat[0] == '0' ? "V2" : "V3") + "Cluster" +
         std::to_string(info.param.cluster_size);
}

class Qcow2ReadTest : public ::testing::TestWithParam<Format> {
 protected:
  ScratchDir dir_{"qcow2"};
};

TEST_P(Qcow2ReadTest, ConvertedImageWithQemuIoWritesReadsAsQemuReadsIt) {
  std::string source = MakeRawSource(dir_, 8 * kMiB);
  std::string image = dir_.path() + "/image.qcow2";
  RunCommand("qemu-img convert -f raw -O qcow2 -o compat=" + std::string(GetParam().compat) +
             ",cluster_size=" + std::to_string(GetParam().cluster_size) + " " + source + " " +
             image);
  // Zero clusters (version 3), partial overwrites, a discard.
  RunCommand(
      "qemu-io -f qcow2 -c 'write -P 0x5a 1000 70000' -c 'write -z 4M 1M' "
      "-c 'write -P 0x33 7340000 5000' -c 'discard 6M 512k' " +
      image);
  auto node = OpenImageOrFail(image, true);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->size(), 8 * kMiB);
  std::vector<unsigned char> expected = QemuContents(image, dir_);
  std::vector<unsigned char> actual = ReadAll(*node);
  EXPECT_EQ(FirstDifference(actual, expected), -1);
  // Odd request sizes cross cluster boundaries at odd places.
  EXPECT_EQ(FirstDifference(ReadAll(*node, 12345), expected), -1);
}

INSTANTIATE_TEST_SUITE_P(Formats, Qcow2ReadTest,
                         ::testing::Values(Format{"0.10", 512}, Format{"1.1", 512},
                                           Format{"0.10", 4096}, Format{"1.1", 4096},
                                           Format{"0.10", 65536}, Format{"1.1", 65536},
                                           Format{"0.10", 2 * kMiB}, Format{"1.1", 2 * kMiB}),
                         FormatName);

// Reads the image through bexd, whole and in odd-sized requests, and compares with QEMU.
void ExpectReadsAsQemu(const std::string& image, const ScratchDir& dir,
                       const testing::ImageOptions& options = {}) {
  auto node = OpenImageOrFail(image, true, options);
  ASSERT_NE(node, nullptr);
  std::vector<unsigned char> expected = QemuContents(image, dir);
  ASSERT_EQ(node->size(), expected.size());
  EXPECT_EQ(FirstDifference(ReadAll(*node), expected), -1) << image;
  EXPECT_EQ(FirstDifference(ReadAll(*node, 100000), expected), -1) << image;
}

struct Compression {
  const char* type;
  uint64_t cluster_size;
};

class Qcow2CompressedReadTest : public ::testing::TestWithParam<Compression> {
 protected:
  ScratchDir dir_{"qcow2"};
};

TEST_P(Qcow2CompressedReadTest, CompressedImageReadsAsQemuReadsIt) {
  std::string source = MakeRawSource(dir_, 8 * kMiB);
  std::string image = dir_.path() + "/compressed.qcow2";
  RunCommand(
      "qemu-img convert -c -f raw -O qcow2 -o compression_type=" + std::string(GetParam().type) +
      ",cluster_size=" + std::to_string(GetParam().cluster_size) + " " + source + " " + image);
  // Some clusters rewritten (no longer compressed), some made zero.
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x77 300000 4096' -c 'write -z 5M 64k' " + image);
  ExpectReadsAsQemu(image, dir_);
}

TEST_P(Qcow2CompressedReadTest, SmallSequentialReadsInFlightTogetherReadAsQemuReadsIt) {
  // Up to 16 reads of the same compressed cluster at once (one inflates it, the others wait for
  // it or find it kept), and reads that straddle clusters; with O_DIRECT, the compressed bytes
  // come in aligned reads around them.
  std::string source = MakeRawSource(dir_, 4 * kMiB);
  std::string image = dir_.path() + "/compressed.qcow2";
  RunCommand(
      "qemu-img convert -c -f raw -O qcow2 -o compression_type=" + std::string(GetParam().type) +
      ",cluster_size=" + std::to_string(GetParam().cluster_size) + " " + source + " " + image);
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x77 300000 4096' -c 'write -z 1M 64k' " + image);
  std::vector<unsigned char> expected = QemuContents(image, dir_);
  for (bool direct : {false, true}) {
    testing::ImageOptions options;
    options.direct = direct;
    auto node = OpenImageOrFail(image, true, options);
    ASSERT_NE(node, nullptr);
    for (uint64_t chunk : {uint64_t{4096}, uint64_t{3000}}) {
      EXPECT_EQ(FirstDifference(testing::ReadWithDepth(*node, chunk, 16), expected), -1)
          << chunk << "-byte reads" << (direct ? " with O_DIRECT" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Qcow2CompressedReadTest,
                         ::testing::Values(Compression{"zlib", 4096}, Compression{"zlib", 65536},
                                           Compression{"zlib", 2 * kMiB}, Compression{"zstd", 4096},
                                           Compression{"zstd", 65536},
                                           Compression{"zstd", 2 * kMiB}),
                         [](const ::testing::TestParamInfo<Compression>& info) {
                           return std::string(info.param.type) +
                                  std::to_string(info.param.cluster_size);
                         });

class Qcow2ChainReadTest : public ::testing::Test {
 protected:
  ScratchDir dir_{"qcow2"};
};

TEST_F(Qcow2ChainReadTest, ThreeLevelChainWithShorterBackingFilesReadsAsQemuReadsIt) {
  // base (raw, 3 MiB) <- mid (qcow2, 5 MiB) <- top (qcow2, 8 MiB): past each backing file's end
  // the image reads zeroes.
  std::string base = dir_.path() + "/base.raw";
  testing::WriteFile(dir_.CreateFile("base.raw", 3 * kMiB), testing::Pattern(3 * kMiB, 1), 0);
  RunCommand("cd " + dir_.path() +
             " && qemu-img create -f qcow2 -b base.raw -F raw mid.qcow2 5M >/dev/null"
             " && qemu-img create -f qcow2 -o cluster_size=4096 -b mid.qcow2 -F qcow2 top.qcow2 "
             "8M >/dev/null");
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x11 1M 100k' -c 'write -P 0x12 4M 64k' " +
             dir_.path() + "/mid.qcow2");
  RunCommand(
      "qemu-io -f qcow2 -c 'write -P 0x21 1050000 3000' -c 'write -z 2M 8k' "
      "-c 'write -P 0x22 7M 4k' " +
      dir_.path() + "/top.qcow2");
  ExpectReadsAsQemu(dir_.path() + "/top.qcow2", dir_);
}

TEST_F(Qcow2ChainReadTest, ChainWithoutItsBackingReadsZeroesWhereNothingIsAllocated) {
  std::string base = dir_.path() + "/base.qcow2";
  std::string top = dir_.path() + "/top.qcow2";
  RunCommand("qemu-img create -f qcow2 " + base +
             " 1M >/dev/null && qemu-io -f qcow2 -c 'write "
             "-P 0x44 0 1M' " +
             base);
  RunCommand("qemu-img create -f qcow2 -b base.qcow2 -F qcow2 " + top +
             " 1M >/dev/null && qemu-io -f qcow2 -c 'write -P 0x55 64k 64k' " + top);
  testing::ImageOptions options;
  options.open_backing = false;  // backing=null
  auto node = OpenImageOrFail(top, true, options);
  ASSERT_NE(node, nullptr);
  std::vector<unsigned char> expected(kMiB, 0);
  std::fill(expected.begin() + 65536, expected.begin() + 131072, 0x55);
  EXPECT_EQ(FirstDifference(ReadAll(*node), expected), -1);
}

TEST_F(Qcow2ChainReadTest, InternalSnapshotsLeaveTheActiveStateAsQemuReadsIt) {
  std::string source = MakeRawSource(dir_, 4 * kMiB);
  std::string image = dir_.path() + "/snap.qcow2";
  RunCommand("qemu-img convert -f raw -O qcow2 " + source + " " + image);
  RunCommand("qemu-img snapshot -c first " + image);
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x66 100000 200000' -c 'write -z 3M 64k' " + image);
  RunCommand("qemu-img snapshot -c second " + image);
  RunCommand("qemu-io -f qcow2 -c 'write -P 0x67 150000 1000' " + image);
  ExpectReadsAsQemu(image, dir_);
  // Going back to the first snapshot with QEMU: bexd reads that state too.
  RunCommand("qemu-img snapshot -a first " + image);
  ExpectReadsAsQemu(image, dir_);
}

TEST_F(Qcow2ChainReadTest, ExtendedL2EntriesReadAsQemuReadsThem) {
  std::string base = dir_.path() + "/base.qcow2";
  std::string image = dir_.path() + "/extl2.qcow2";
  RunCommand("qemu-img create -f qcow2 " + base +
             " 4M >/dev/null && qemu-io -f qcow2 -c 'write "
             "-P 0x31 0 4M' " +
             base);
  RunCommand(
      "qemu-img create -f qcow2 -o extended_l2=on,cluster_size=64k -b base.qcow2 -F "
      "qcow2 " +
      image + " 4M >/dev/null");
  // Single subclusters (2 KiB) allocated, made zero, and a compressed cluster.
  RunCommand(
      "qemu-io -f qcow2 -c 'write -P 0x41 2048 2048' -c 'write -P 0x42 70000 5000' "
      "-c 'write -z 131072 4096' -c 'write -c -P 0x43 1M 64k' -c 'write -z 2M 64k' " +
      image);
  ExpectReadsAsQemu(image, dir_);
}

class Qcow2RefcountWidthTest : public ::testing::TestWithParam<int> {
 protected:
  ScratchDir dir_{"qcow2"};
};

TEST_P(Qcow2RefcountWidthTest, ReadsEveryWidthAndWritesOnlySixteenBits) {
  std::string source = MakeRawSource(dir_, 2 * kMiB);
  std::string image = dir_.path() + "/refcounts.qcow2";
  RunCommand("qemu-img convert -f raw -O qcow2 -o refcount_bits=" + std::to_string(GetParam()) +
             " " + source + " " + image);
  ExpectReadsAsQemu(image, dir_);
  auto writable = testing::OpenImage(image, false);
  if (GetParam() == 16) {
    EXPECT_TRUE(writable.ok()) << writable.status();
  } else {
    ASSERT_FALSE(writable.ok());
    EXPECT_EQ(writable.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(writable.status().message().find("16-bit"), std::string::npos) << writable.status();
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, Qcow2RefcountWidthTest, ::testing::Values(1, 2, 4, 8, 16, 32, 64));

}  // namespace
}  // namespace bexd::block
