// SPDX-License-Identifier: GPL-2.0-or-later
// util::ParseSize, the one parser for sizes in options, on the command line and in perf tools.
#include "util/size.h"

#include <gtest/gtest.h>

namespace bexd::util {
namespace {

TEST(ParseSizeTest, PlainNumbersAndBinarySuffixes) {
  EXPECT_EQ(*ParseSize("0"), 0u);
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("64k"), 64u << 10);
  EXPECT_EQ(*ParseSize("64K"), 64u << 10);
  EXPECT_EQ(*ParseSize("3m"), 3u << 20);
  EXPECT_EQ(*ParseSize("1G"), uint64_t{1} << 30);
  EXPECT_EQ(*ParseSize("2T"), uint64_t{2} << 40);
  EXPECT_EQ(*ParseSize("1P"), uint64_t{1} << 50);
  EXPECT_EQ(*ParseSize("15E"), uint64_t{15} << 60);
  EXPECT_EQ(*ParseSize("18446744073709551615"), UINT64_MAX);
}

TEST(ParseSizeTest, RefusesWhatIsNotASize) {
  for (const char* text : {"", "k", "-1", "+1", " 1", "1 ", "1.5G", "1KB", "1x", "0x10"}) {
    absl::StatusOr<uint64_t> size = ParseSize(text);
    EXPECT_FALSE(size.ok()) << text;
  }
  EXPECT_EQ(ParseSize("1x").status().message(),
            "'1x' has an unknown suffix 'x' (use k, M, G, T, P or E, powers of 1024)");
  EXPECT_EQ(ParseSize("x").status().message(), "'x' is not a number");
}

TEST(ParseSizeTest, RefusesValuesAboveTheRange) {
  EXPECT_EQ(ParseSize("16E").status().message(), "'16E' is larger than 2^64 - 1");
  EXPECT_EQ(ParseSize("18446744073709551616").status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ParseSize("17179869184G").status().code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace bexd::util
