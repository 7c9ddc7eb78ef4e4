// SPDX-License-Identifier: GPL-2.0-or-later
// The options QEMU takes on every block node whatever its driver: discard (ignore/unmap, and the
// -drive spellings off/on) reaches each driver that acts on it, detect-zeroes (off/on/unmap)
// reaches the node, and unmap without discard=unmap is refused with QEMU's text.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <variant>

#include "cli/config/blockdev_schema.h"
#include "cli/config/keyval.h"

namespace bexd::cli {
namespace {

// Every driver bexd has, with its required options.
constexpr const char* kDrivers[] = {
    "driver=file,node-name=n0,filename=/img/a",
    "driver=host_device,node-name=n0,filename=/dev/null",
    "driver=null-co,node-name=n0",
    "driver=raw,node-name=n0,file=f0",
    "driver=qcow2,node-name=n0,file=f0",
    "driver=rbd,node-name=n0,pool=p,image=i",
    "driver=nbd,node-name=n0,server.type=unix,server.path=/run/nbd.sock",
};

absl::StatusOr<block::BlockdevOptions> Parse(const std::string& keyval) {
  absl::StatusOr<nlohmann::json> object = ParseKeyval(keyval);
  if (!object.ok()) return object.status();
  return ParseBlockdevOptions(*object, Syntax::kKeyval);
}

// The discard mode the driver was given; nullopt for null-co, which stores nothing to discard.
std::optional<block::DiscardMode> DiscardOf(const block::BlockdevOptions& options) {
  return std::visit(
      [](const auto& driver) -> std::optional<block::DiscardMode> {
        if constexpr (requires { driver.discard; }) {
          return driver.discard;
        } else {
          return std::nullopt;
        }
      },
      options.driver);
}

TEST(BlockCommonOptionsTest, DiscardOnEveryDriver) {
  for (const char* driver : kDrivers) {
    SCOPED_TRACE(driver);
    const bool stores = std::string(driver).find("null-co") == std::string::npos;
    for (auto [value, mode] : {std::pair{"ignore", block::DiscardMode::kIgnore},
                               std::pair{"off", block::DiscardMode::kIgnore},
                               std::pair{"unmap", block::DiscardMode::kUnmap},
                               std::pair{"on", block::DiscardMode::kUnmap}}) {
      absl::StatusOr<block::BlockdevOptions> options =
          Parse(std::string(driver) + ",discard=" + value);
      ASSERT_TRUE(options.ok()) << value << ": " << options.status();
      if (stores) {
        EXPECT_EQ(DiscardOf(*options), mode) << value;
      }
    }
    absl::StatusOr<block::BlockdevOptions> plain = Parse(driver);
    ASSERT_TRUE(plain.ok()) << plain.status();
    if (stores) {
      EXPECT_EQ(DiscardOf(*plain), block::DiscardMode::kIgnore) << "QEMU's default";
    }
    absl::StatusOr<block::BlockdevOptions> bad = Parse(std::string(driver) + ",discard=trim");
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().message(),
              "discard: expected one of ignore, off, unmap, on; got \"trim\"");
  }
}

TEST(BlockCommonOptionsTest, DetectZeroesOnEveryDriver) {
  for (const char* driver : kDrivers) {
    SCOPED_TRACE(driver);
    absl::StatusOr<block::BlockdevOptions> plain = Parse(driver);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(plain->detect_zeroes, block::DetectZeroes::kOff);
    for (auto [value, mode] :
         {std::pair{"off", block::DetectZeroes::kOff}, std::pair{"on", block::DetectZeroes::kOn}}) {
      absl::StatusOr<block::BlockdevOptions> options =
          Parse(std::string(driver) + ",detect-zeroes=" + value);
      ASSERT_TRUE(options.ok()) << value << ": " << options.status();
      EXPECT_EQ(options->detect_zeroes, mode);
    }
    absl::StatusOr<block::BlockdevOptions> unmap =
        Parse(std::string(driver) + ",detect-zeroes=unmap,discard=unmap");
    ASSERT_TRUE(unmap.ok()) << unmap.status();
    EXPECT_EQ(unmap->detect_zeroes, block::DetectZeroes::kUnmap);

    // QEMU (bdrv_parse_detect_zeroes) refuses unmap on a node that does not discard.
    for (const char* discard : {"", ",discard=ignore"}) {
      absl::StatusOr<block::BlockdevOptions> refused =
          Parse(std::string(driver) + ",detect-zeroes=unmap" + discard);
      ASSERT_FALSE(refused.ok());
      EXPECT_EQ(refused.status().message(),
                "detect-zeroes: setting detect-zeroes to unmap is not allowed without setting "
                "discard operation to unmap");
    }
    absl::StatusOr<block::BlockdevOptions> bad = Parse(std::string(driver) + ",detect-zeroes=yes");
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().message(), "detect-zeroes: expected one of off, on, unmap; got \"yes\"");
  }
}

// detect-zeroes is the node's own, as in QEMU: an inline file child does not inherit it (and
// takes discard=unmap, so it may be given unmap without saying discard).
TEST(BlockCommonOptionsTest, DetectZeroesIsNotInherited) {
  absl::StatusOr<block::BlockdevOptions> options =
      Parse("driver=raw,node-name=r0,detect-zeroes=on,file.driver=file,file.filename=/img/a");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->detect_zeroes, block::DetectZeroes::kOn);
  ASSERT_TRUE(options->file.has_value() && options->file->options != nullptr);
  EXPECT_EQ(options->file->options->detect_zeroes, block::DetectZeroes::kOff);

  options = Parse(
      "driver=raw,node-name=r0,file.driver=file,file.filename=/img/a,file.detect-zeroes=unmap");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->file->options->detect_zeroes, block::DetectZeroes::kUnmap);
}

TEST(BlockCommonOptionsTest, JsonSpelling) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(
      nlohmann::json::parse(R"({"driver": "file", "node-name": "n0", "filename": "/img/a",
                                "discard": "unmap", "detect-zeroes": "unmap"})"),
      Syntax::kJson);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->detect_zeroes, block::DetectZeroes::kUnmap);
  EXPECT_EQ(std::get<block::FileOptions>(options->driver).discard, block::DiscardMode::kUnmap);
}

}  // namespace
}  // namespace bexd::cli
