// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/json_stream.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <vector>

#include "cli/config/json_text.h"

namespace bexd::cli {
namespace {

// Messages as their text, refusals as "error: " and the message.
std::vector<std::string> Drain(JsonStream& stream) {
  std::vector<std::string> messages;
  while (std::optional<absl::StatusOr<std::string>> message = stream.Next()) {
    messages.push_back(message->ok() ? **message
                                     : "error: " + std::string(message->status().message()));
  }
  return messages;
}

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonStreamTest, SplitsObjectsRegardlessOfLines) {
  JsonStream stream(1 << 20);
  stream.Append("{\"execute\":\"a\"}{\"execute\":\n\"b\"}\r\n  [1,{\"x\":[2]}]");
  EXPECT_EQ(Drain(stream), (std::vector<std::string>{"{\"execute\":\"a\"}", "{\"execute\":\n\"b\"}",
                                                     "[1,{\"x\":[2]}]"}));
}

TEST(JsonStreamTest, WaitsForTheRestOfAMessage) {
  JsonStream stream(1 << 20);
  stream.Append("{\"execute\":\"quit\", \"id\": \"}{\\\"");
  EXPECT_EQ(Drain(stream), std::vector<std::string>{});
  stream.Append("\"}");
  EXPECT_EQ(Drain(stream), std::vector<std::string>{"{\"execute\":\"quit\", \"id\": \"}{\\\"\"}"});
}

// As QEMU's streamer: every value or token outside brackets is a message of its own (which the
// caller refuses), so a request after it on the same line is still served.
TEST(JsonStreamTest, ValuesAndTokensOutsideBracketsAreMessagesOfTheirOwn) {
  JsonStream stream(1 << 20);
  stream.Append("hello world\n{\"a\":1}\n\"str\"{\"b\":2}123 [3]-1.5e3{\"c\":4}'x'} ,:null\n");
  EXPECT_EQ(Drain(stream), (std::vector<std::string>{"hello", "world", "{\"a\":1}", "\"str\"",
                                                     "{\"b\":2}", "123", "[3]", "-1.5e3",
                                                     "{\"c\":4}", "\"x\"", "}", ",", ":", "null"}));
  // A word is complete only once something follows it.
  stream.Append("tru");
  EXPECT_EQ(Drain(stream), std::vector<std::string>{});
  stream.Append("e{}");
  EXPECT_EQ(Drain(stream), (std::vector<std::string>{"true", "{}"}));
}

TEST(JsonStreamTest, ManyPipelinedMessages) {
  JsonStream stream(1024);
  std::string input;
  for (int i = 0; i < 10000; ++i) input += "{\"id\":" + std::to_string(i) + "}";
  stream.Append(input);
  std::vector<std::string> messages = Drain(stream);
  ASSERT_EQ(messages.size(), 10000u);
  EXPECT_EQ(messages.back(), "{\"id\":9999}");
  EXPECT_EQ(stream.buffered_bytes(), 0u);
}

// QEMU's limit: 1024 levels of objects and arrays together, counting the outer object.
TEST(JsonStreamTest, NestingUpToTheLimitPasses) {
  JsonStream stream(1 << 20);
  std::string message = "{\"id\":" + Nested(kMaxJsonDepth - 1) + "}";
  stream.Append(message);
  EXPECT_EQ(Drain(stream), std::vector<std::string>{message});
}

TEST(JsonStreamTest, DeeperNestingIsRefusedAndSkippedWithoutKeepingIt) {
  JsonStream stream(1 << 20);
  stream.Append("{\"id\":" + std::string(kMaxJsonDepth, '['));
  EXPECT_EQ(Drain(stream), std::vector<std::string>{"error: " + JsonDepthError()});
  // The rest of the refused message, however long, is skipped and not kept; brackets in its
  // strings do not end it early.
  for (int i = 0; i < 100; ++i) {
    stream.Append(std::string(10000, '[') + "\"]]]'\"" + std::string(10000, ']'));
    EXPECT_EQ(Drain(stream), std::vector<std::string>{});
    EXPECT_EQ(stream.buffered_bytes(), 0u);
  }
  stream.Append(std::string(kMaxJsonDepth, ']') + "}{\"execute\":\"next\"}");
  EXPECT_EQ(Drain(stream), std::vector<std::string>{"{\"execute\":\"next\"}"});
}

TEST(JsonStreamTest, LongMessagesAreRefusedAndSkipped) {
  JsonStream stream(1024);
  stream.Append("{\"a\":\"");
  std::vector<std::string> messages;
  for (int i = 0; i < 100; ++i) {
    stream.Append(std::string(100, 'x'));
    for (const std::string& message : Drain(stream)) messages.push_back(message);
    EXPECT_LE(stream.buffered_bytes(), 1024u);
  }
  EXPECT_EQ(messages, std::vector<std::string>{"error: JSON token size limit exceeded (a request "
                                               "may be at most 1024 bytes)"});
  stream.Append("\"}{\"b\":2}");
  EXPECT_EQ(Drain(stream), std::vector<std::string>{"{\"b\":2}"});
}

TEST(JsonStreamTest, SizeLimitCountsEveryByteOfTheMessage) {
  JsonStream stream(16);
  stream.Append(R"({"a":"12345678"})");  // 16 bytes
  EXPECT_EQ(Drain(stream), std::vector<std::string>{R"({"a":"12345678"})"});
  stream.Append(R"( {"a":"123456789"}{"b":1})");  // 17 bytes, the last one closing it
  EXPECT_EQ(Drain(stream),
            (std::vector<std::string>{
                "error: JSON token size limit exceeded (a request may be at most 16 bytes)",
                R"({"b":1})"}));
}

TEST(JsonStreamTest, LongLinesAreRefusedAndSkipped) {
  JsonStream stream(1024);
  stream.Append(std::string(5000, 'x'));
  EXPECT_EQ(Drain(stream).size(), 1u);
  EXPECT_EQ(stream.buffered_bytes(), 0u);
  stream.Append("xx\n{\"b\":2}");
  EXPECT_EQ(Drain(stream), std::vector<std::string>{"{\"b\":2}"});
}

// What QEMU's lexer accepts in strings, as the JSON text nlohmann parses.
TEST(JsonStreamTest, RewritesSingleQuotedStrings) {
  struct Case {
    std::string input;
    nlohmann::json value;
  } cases[] = {
      {R"({'execute': 'query-version'})", {{"execute", "query-version"}}},
      {R"(['it\'s'])", {"it's"}},
      {R"(['say "hi"'])", {"say \"hi\""}},
      {R"(['say \"hi\"'])", {"say \"hi\""}},
      {R"(["it\'s"])", {"it's"}},
      {R"(['back\\slash', 'tab\t', '\u00e9', '\/', "'"])", {"back\\slash", "tab\t", "é", "/", "'"}},
      {R"(['\\'])", {"\\"}},
      {R"(['\\\''])", {"\\'"}},
      {R"(['{[', "]}"])", {"{[", "]}"}},
  };
  for (const Case& c : cases) {
    JsonStream stream(1 << 20);
    stream.Append(c.input);
    std::vector<std::string> messages = Drain(stream);
    ASSERT_EQ(messages.size(), 1u) << c.input;
    absl::StatusOr<nlohmann::json> parsed = ParseJsonText(messages[0]);
    ASSERT_TRUE(parsed.ok()) << c.input << " -> " << messages[0] << ": " << parsed.status();
    EXPECT_EQ(*parsed, c.value) << c.input;
  }
}

TEST(JsonStreamTest, InvalidEscapesStayInvalid) {
  for (std::string input : {R"(['\x'])", R"(["\q"])", "['\x01']"}) {
    JsonStream stream(1 << 20);
    stream.Append(input);
    std::vector<std::string> messages = Drain(stream);
    ASSERT_EQ(messages.size(), 1u) << input;
    EXPECT_FALSE(ParseJsonText(messages[0]).ok()) << input << " -> " << messages[0];
  }
}

// QEMU refuses a key given twice in one object; nlohmann alone would keep the last value.
TEST(JsonTextTest, ARepeatedKeyIsRefused) {
  absl::StatusOr<nlohmann::json> parsed = ParseJsonText(
      R"({"execute": "blockdev-add", "arguments": {"node-name": "a", "node-name": "b"}})");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(), "invalid JSON: duplicate key 'node-name'");
  // The same key in different objects is fine.
  parsed = ParseJsonText(R"({"a": {"a": 1, "b": [{"a": 2}, {"a": 3}]}, "b": {"a": 4}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)["b"]["a"], 4);
}

}  // namespace
}  // namespace bexd::cli
