// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/keyval.h"

#include <gtest/gtest.h>

namespace bexd::cli {
namespace {

using nlohmann::json;

json Parse(std::string_view text, std::string_view implied = {}) {
  absl::StatusOr<json> result = ParseKeyval(text, implied);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : json();
}

std::string Error(std::string_view text, std::string_view implied = {}) {
  absl::StatusOr<json> result = ParseKeyval(text, implied);
  EXPECT_FALSE(result.ok()) << "parsed " << text << " as " << result->dump();
  return result.ok() ? "" : std::string(result.status().message());
}

TEST(KeyvalTest, FlatPairsStayStrings) {
  EXPECT_EQ(Parse("driver=file,node-name=disk0,filename=disk.img"),
            json({{"driver", "file"}, {"node-name", "disk0"}, {"filename", "disk.img"}}));
}

TEST(KeyvalTest, DottedKeysNest) {
  EXPECT_EQ(
      Parse("cache.direct=on,cache.no-flush=off,addr.type=unix"),
      json({{"cache", {{"direct", "on"}, {"no-flush", "off"}}}, {"addr", {{"type", "unix"}}}}));
}

TEST(KeyvalTest, DoubleCommaIsALiteralComma) {
  EXPECT_EQ(Parse("filename=a,,b.img,id=x"), json({{"filename", "a,b.img"}, {"id", "x"}}));
  EXPECT_EQ(Parse("filename=ends,,"), json({{"filename", "ends,"}}));
}

TEST(KeyvalTest, EmptyValueAndEqualsInValue) {
  EXPECT_EQ(Parse("a=,b=x=y"), json({{"a", ""}, {"b", "x=y"}}));
}

TEST(KeyvalTest, ImpliedKeyOnlyFirst) {
  EXPECT_EQ(Parse("iothread,id=t0", "qom-type"), json({{"qom-type", "iothread"}, {"id", "t0"}}));
  EXPECT_EQ(Parse("null-co,node-name=n", "driver"),
            json({{"driver", "null-co"}, {"node-name", "n"}}));
  EXPECT_EQ(Error("id=t0,iothread", "qom-type"), "expected key=value, got 'iothread'");
  EXPECT_EQ(Error("iothread,id=t0"), "expected key=value, got 'iothread'");
}

TEST(KeyvalTest, IndexedKeysBecomeLists) {
  EXPECT_EQ(Parse("iothread.0=a,iothread.1=b"), json({{"iothread", {"a", "b"}}}));
  EXPECT_EQ(Error("iothread.0=a,iothread.2=b"),
            "list 'iothread' has no element 1 (indexes must be 0..n-1)");
  EXPECT_EQ(Error("x.0=a,x.name=b"), "'x' mixes list indexes and names");
}

TEST(KeyvalTest, Errors) {
  EXPECT_EQ(Error("a=1,a=2"), "key 'a' is given more than once");
  EXPECT_EQ(Error("cache=x,cache.direct=on"), "'cache' is both a value and a group of keys");
  EXPECT_EQ(Error("cache.direct=on,cache=x"), "'cache' is both a value and a group of keys");
  EXPECT_EQ(Parse("a=1,,,b=2"), json({{"a", "1,"}, {"b", "2"}}));
  EXPECT_EQ(Error(",a=1"), "empty element between commas");
  EXPECT_EQ(Error("a=1,"), "trailing comma");
  EXPECT_EQ(Error("=1"), "empty key before '='");
  EXPECT_EQ(Error("a..b=1"), "invalid key 'a..b'");
  EXPECT_EQ(Error("a b=1"), "invalid key 'a b'");
  EXPECT_EQ(Error("0=x"), "invalid key '0'");
}

TEST(KeyvalTest, EmptyTextIsAnEmptyObject) { EXPECT_EQ(Parse(""), json::object()); }

}  // namespace
}  // namespace bexd::cli
