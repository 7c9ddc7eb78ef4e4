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

}  // namespace
}  // namespace bexd::block
