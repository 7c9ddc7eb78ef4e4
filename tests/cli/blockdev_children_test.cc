// SPDX-License-Identifier: GPL-2.0-or-later
// Children in --blockdev / blockdev-add options: by node name, defined inline (QSD's dotted keys
// in keyval, nested objects in JSON), backing=null; both syntaxes give the same options, and
// inline children inherit what QEMU's children inherit.
#include <gtest/gtest.h>

#include "cli/config/blockdev_schema.h"
#include "cli/config/daemon_config.h"
#include "cli/config/json_text.h"
#include "cli/config/keyval.h"

namespace bexd::cli {
namespace {

using block::ChildRef;
using nlohmann::json;

block::BlockdevOptions Parse(const json& object, Syntax syntax) {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(object, syntax);
  EXPECT_TRUE(options.ok()) << options.status() << " for " << object.dump();
  return options.ok() ? *options : block::BlockdevOptions{};
}

block::BlockdevOptions FromKeyval(std::string_view text) {
  absl::StatusOr<json> object = ParseKeyval(text, "driver");
  EXPECT_TRUE(object.ok()) << object.status();
  return Parse(object.ok() ? *object : json::object(), Syntax::kKeyval);
}

block::BlockdevOptions FromJson(std::string_view text) {
  absl::StatusOr<json> object = ParseJsonText(text);
  EXPECT_TRUE(object.ok()) << object.status();
  return Parse(object.ok() ? *object : json::object(), Syntax::kJson);
}

std::string Error(const json& object, Syntax syntax, const std::string& path = "") {
  absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(object, syntax, path);
  EXPECT_FALSE(options.ok()) << object.dump();
  return options.ok() ? "" : std::string(options.status().message());
}

std::string KeyvalError(std::string_view text) {
  absl::StatusOr<json> object = ParseKeyval(text, "driver");
  if (!object.ok()) return std::string(object.status().message());
  return Error(*object, Syntax::kKeyval);
}

TEST(BlockdevChildrenTest, ChildByNodeNameIsTheSameInBothSyntaxes) {
  block::BlockdevOptions keyval =
      FromKeyval("driver=raw,node-name=fmt0,file=file0,offset=1M,size=4M");
  block::BlockdevOptions json_options = FromJson(
      R"({"driver": "raw", "node-name": "fmt0", "file": "file0",
          "offset": 1048576, "size": 4194304})");
  EXPECT_EQ(keyval, json_options);
  ASSERT_TRUE(keyval.file.has_value());
  EXPECT_EQ(keyval.file->kind, ChildRef::Kind::kReference);
  EXPECT_EQ(keyval.file->node_name, "file0");
  EXPECT_FALSE(keyval.backing.has_value());
  const auto& raw = std::get<block::RawOptions>(keyval.driver);
  EXPECT_EQ(raw.offset, 1u << 20);
  EXPECT_EQ(raw.size, std::optional<uint64_t>(4u << 20));
  EXPECT_EQ(raw.discard, block::DiscardMode::kIgnore);
}

TEST(BlockdevChildrenTest, InlineChildIsTheSameInBothSyntaxes) {
  // QSD's own spelling of a format node over an inline protocol node.
  block::BlockdevOptions keyval = FromKeyval(
      "raw,node-name=fmt0,file.driver=file,file.filename=/img/disk.img,file.aio=threads");
  block::BlockdevOptions json_options = FromJson(
      R"({"driver": "raw", "node-name": "fmt0",
          "file": {"driver": "file", "filename": "/img/disk.img", "aio": "threads"}})");
  EXPECT_EQ(keyval, json_options);
  ASSERT_TRUE(keyval.file.has_value());
  ASSERT_EQ(keyval.file->kind, ChildRef::Kind::kInline);
  const block::BlockdevOptions& child = *keyval.file->options;
  EXPECT_EQ(child.node_name, "");  // the graph names it
  EXPECT_FALSE(child.read_only);
  const auto& file = std::get<block::FileOptions>(child.driver);
  EXPECT_EQ(file.filename, "/img/disk.img");
  EXPECT_EQ(file.aio, block::AioMode::kThreads);
  // QEMU: a format node's file child passes discards on; the format node decides.
  EXPECT_EQ(file.discard, block::DiscardMode::kUnmap);
}

TEST(BlockdevChildrenTest, InlineChildInheritsReadOnlyAndCacheUnlessItSetsThem) {
  block::BlockdevOptions inherited = FromKeyval(
      "driver=raw,node-name=fmt0,read-only=on,cache.direct=on,cache.no-flush=on,"
      "file.driver=file,file.filename=/img/a");
  const block::BlockdevOptions& child = *inherited.file->options;
  EXPECT_TRUE(child.read_only);
  EXPECT_TRUE(std::get<block::FileOptions>(child.driver).cache_direct);
  EXPECT_TRUE(std::get<block::FileOptions>(child.driver).cache_no_flush);
  EXPECT_EQ(inherited, FromJson(R"({"driver": "raw", "node-name": "fmt0", "read-only": true,
      "cache": {"direct": true, "no-flush": true},
      "file": {"driver": "file", "filename": "/img/a"}})"));

  block::BlockdevOptions own = FromKeyval(
      "driver=raw,node-name=fmt0,read-only=on,cache.direct=on,discard=unmap,"
      "file.driver=file,file.filename=/img/a,file.cache.direct=off,file.discard=ignore,"
      "file.node-name=proto0");
  const block::BlockdevOptions& own_child = *own.file->options;
  EXPECT_EQ(own_child.node_name, "proto0");
  EXPECT_TRUE(own_child.read_only);
  EXPECT_FALSE(std::get<block::FileOptions>(own_child.driver).cache_direct);
  EXPECT_EQ(std::get<block::FileOptions>(own_child.driver).discard, block::DiscardMode::kIgnore);
  EXPECT_EQ(std::get<block::RawOptions>(own.driver).discard, block::DiscardMode::kUnmap);
}

TEST(BlockdevChildrenTest, NestedInlineChildren) {
  block::BlockdevOptions keyval = FromKeyval(
      "driver=raw,node-name=part1,offset=1M,file.driver=raw,file.size=8M,"
      "file.file.driver=null-co,file.file.size=16M");
  EXPECT_EQ(keyval, FromJson(R"({"driver": "raw", "node-name": "part1", "offset": 1048576,
      "file": {"driver": "raw", "size": 8388608,
               "file": {"driver": "null-co", "size": 16777216}}})"));
  const block::BlockdevOptions& middle = *keyval.file->options;
  EXPECT_EQ(std::get<block::RawOptions>(middle.driver).size, std::optional<uint64_t>(8u << 20));
  ASSERT_EQ(middle.file->kind, ChildRef::Kind::kInline);
  EXPECT_EQ(std::get<block::NullOptions>(middle.file->options->driver).size, 16u << 20);
}

TEST(BlockdevChildrenTest, BackingByNameNullInlineOrFromTheImage) {
  block::BlockdevOptions by_name = FromKeyval("driver=qcow2,node-name=top,file=f0,backing=base0");
  EXPECT_EQ(by_name, FromJson(R"({"driver": "qcow2", "node-name": "top", "file": "f0",
                                  "backing": "base0"})"));
  EXPECT_EQ(by_name.backing->kind, ChildRef::Kind::kReference);
  EXPECT_EQ(by_name.backing->node_name, "base0");

  block::BlockdevOptions none = FromKeyval("driver=qcow2,node-name=top,file=f0,backing=null");
  EXPECT_EQ(none, FromJson(R"({"driver": "qcow2", "node-name": "top", "file": "f0",
                               "backing": null})"));
  EXPECT_EQ(none.backing->kind, ChildRef::Kind::kNull);
  // QEMU 7.2's keyval spelling, deprecated there (and in JSON, too).
  EXPECT_EQ(FromKeyval("driver=qcow2,node-name=top,file=f0,backing="), none);
  EXPECT_EQ(FromJson(R"({"driver": "qcow2", "node-name": "top", "file": "f0", "backing": ""})"),
            none);

  block::BlockdevOptions from_image = FromKeyval("driver=qcow2,node-name=top,file=f0");
  EXPECT_FALSE(from_image.backing.has_value());

  block::BlockdevOptions inline_backing = FromKeyval(
      "driver=qcow2,node-name=top,file=f0,backing.driver=qcow2,backing.node-name=base0,"
      "backing.file.driver=file,backing.file.filename=/img/base.qcow2");
  EXPECT_EQ(inline_backing, FromJson(R"({"driver": "qcow2", "node-name": "top", "file": "f0",
      "backing": {"driver": "qcow2", "node-name": "base0",
                  "file": {"driver": "file", "filename": "/img/base.qcow2"}}})"));
  const block::BlockdevOptions& base = *inline_backing.backing->options;
  EXPECT_EQ(base.node_name, "base0");
  // QEMU opens backing files read-only, and their own children inherit that.
  EXPECT_TRUE(base.read_only);
  EXPECT_TRUE(base.file->options->read_only);
}

TEST(BlockdevChildrenTest, Qcow2OptionsTakeQemuNames) {
  block::BlockdevOptions keyval = FromKeyval(
      "driver=qcow2,node-name=q,file=f0,lazy-refcounts=on,l2-cache-size=4M,"
      "refcount-cache-size=256k,cache-clean-interval=30,discard=unmap");
  EXPECT_EQ(keyval, FromJson(R"({"driver": "qcow2", "node-name": "q", "file": "f0",
      "lazy-refcounts": true, "l2-cache-size": 4194304, "refcount-cache-size": 262144,
      "cache-clean-interval": 30, "discard": "unmap"})"));
  const auto& qcow2 = std::get<block::Qcow2Options>(keyval.driver);
  EXPECT_EQ(qcow2.lazy_refcounts, std::optional<bool>(true));
  EXPECT_EQ(qcow2.l2_cache_size, std::optional<uint64_t>(4u << 20));
  EXPECT_EQ(qcow2.refcount_cache_size, std::optional<uint64_t>(256u << 10));
  EXPECT_EQ(qcow2.cache_clean_interval, 30u);
  EXPECT_EQ(qcow2.discard, block::DiscardMode::kUnmap);

  const block::BlockdevOptions plain = FromKeyval("qcow2,node-name=q,file=f");
  const auto& defaults = std::get<block::Qcow2Options>(plain.driver);
  EXPECT_FALSE(defaults.lazy_refcounts.has_value());
  EXPECT_FALSE(defaults.l2_cache_size.has_value());
  EXPECT_FALSE(defaults.cache_size.has_value());
  EXPECT_EQ(defaults.cache_clean_interval, 600u);

  const block::BlockdevOptions total = FromKeyval("qcow2,node-name=q,file=f,cache-size=8M");
  EXPECT_EQ(std::get<block::Qcow2Options>(total.driver).cache_size,
            std::optional<uint64_t>(8u << 20));

  // QEMU's discard pass-through switches, l2-cache-entry-size and overlap-check.
  const block::BlockdevOptions passes = FromKeyval(
      "qcow2,node-name=q,file=f,pass-discard-request=off,pass-discard-other=on,"
      "pass-discard-snapshot=off,l2-cache-entry-size=4k,overlap-check=none");
  const auto& pass = std::get<block::Qcow2Options>(passes.driver);
  EXPECT_EQ(pass.pass_discard_request, std::optional<bool>(false));
  EXPECT_TRUE(pass.pass_discard_other);
  EXPECT_EQ(pass.l2_cache_entry_size, std::optional<uint64_t>(4096));
  EXPECT_FALSE(defaults.pass_discard_request.has_value());
  EXPECT_FALSE(defaults.pass_discard_other);
  EXPECT_EQ(KeyvalError("qcow2,node-name=q,file=f,overlap-check=most"),
            "overlap-check: expected one of none, constant, cached, all; got 'most'");
}

TEST(BlockdevChildrenTest, ErrorsNameTheChildKey) {
  EXPECT_EQ(KeyvalError("driver=raw,node-name=r"), "file: missing (required)");
  EXPECT_EQ(KeyvalError("driver=raw,node-name=r,file.driver=file"),
            "file.filename: missing (required)");
  EXPECT_EQ(KeyvalError("driver=raw,node-name=r,file=f,file.driver=file"),
            "'file' is both a value and a group of keys");
  EXPECT_EQ(KeyvalError("driver=raw,node-name=r,file.driver=file,file.filename=x,file.node-name=9"),
            "file.node-name: '9' must start with a letter (then letters, digits, -, . or _)");
  EXPECT_EQ(KeyvalError("driver=raw,node-name=r,file=f,backing=b"),
            "backing: unknown option (known here: auto-read-only, cache, detect-zeroes, discard, "
            "driver, file, force-share, node-name, offset, read-only, size)");
  EXPECT_EQ(KeyvalError("driver=raw,node-name=r,file=f,offset=-1"),
            "offset: expected a size in bytes (an integer, optionally with a k, M, G, T, P or E "
            "suffix), got \"-1\"");
  EXPECT_EQ(KeyvalError("driver=qcow2,node-name=q,file=f,backing.driver=qcow2"),
            "backing.file: missing (required)");

  json object = {{"driver", "raw"}, {"node-name", "r"}, {"file", 5}};
  EXPECT_EQ(Error(object, Syntax::kJson), "file: expected a node name or a node's options, got 5");
  object["file"] = nullptr;
  EXPECT_EQ(Error(object, Syntax::kJson),
            "file: expected a node name or a node's options, got null");
  object = {{"driver", "qcow2"}, {"node-name", "q"}, {"file", "f"}, {"backing", true}};
  EXPECT_EQ(Error(object, Syntax::kJson),
            "backing: expected a node name, a node's options or null, got true");
  object = {{"driver", "raw"},
            {"node-name", "r"},
            {"file", {{"driver", "file"}, {"filename", "x"}, {"size", 1}}}};
  EXPECT_EQ(
      Error(object, Syntax::kJson, "blockdev[2]"),
      "blockdev[2].file.size: unknown option (known here: aio, aio-max-batch, auto-read-only, "
      "cache, detect-zeroes, discard, driver, drop-cache, filename, force-share, locking, "
      "node-name, pr-manager, read-only, x-check-cache-dropped)");
}

TEST(BlockdevChildrenTest, ConfigFileAndCommandLineSpellingsAgree) {
  DaemonConfig config;
  ASSERT_TRUE(config
                  .AddConfigFile(json::parse(R"({"blockdev": [
                    {"driver": "raw", "node-name": "fmt0", "offset": 512,
                     "file": {"driver": "file", "filename": "/img/disk.img"}}]})"))
                  .ok());
  ASSERT_EQ(config.blockdevs.size(), 1u);
  EXPECT_EQ(
      config.blockdevs[0],
      FromKeyval("raw,node-name=fmt0,offset=512,file.driver=file,file.filename=/img/disk.img"));
}

}  // namespace
}  // namespace bexd::cli
