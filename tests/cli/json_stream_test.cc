#include "cli/json_stream.h"

#include <gtest/gtest.h>

#include <vector>

namespace bexd::cli {
namespace {

std::vector<std::string> Drain(JsonStream& stream) {
  std::vector<std::string> documents;
  while (std::optional<std::string> document = stream.Next()) documents.push_back(*document);
  return documents;
}

TEST(JsonStreamTest, SplitsObjectsRegardlessOfLines) {
  JsonStream stream(1 << 20);
  stream.Append("{\"execute\":\"a\"}{\"execute\":\n\"b\"}\r\n  [1,{\"x\":[2]}]");
  EXPECT_EQ(Drain(stream), (std::vector<std::string>{"{\"execute\":\"a\"}", "{\"execute\":\n\"b\"}",
                                                     "[1,{\"x\":[2]}]"}));
}

TEST(JsonStreamTest, WaitsForTheRestOfADocument) {
  JsonStream stream(1 << 20);
  stream.Append("{\"execute\":\"quit\", \"id\": \"}{\\\"");
  EXPECT_EQ(Drain(stream), std::vector<std::string>{});
  stream.Append("\"}");
  EXPECT_EQ(Drain(stream), std::vector<std::string>{"{\"execute\":\"quit\", \"id\": \"}{\\\"\"}"});
}

TEST(JsonStreamTest, GarbageIsOneLine) {
  JsonStream stream(1 << 20);
  stream.Append("hello world\n{\"a\":1}\n");
  EXPECT_EQ(Drain(stream), (std::vector<std::string>{"hello world\n", "{\"a\":1}"}));
}

TEST(JsonStreamTest, OverflowsOnAnEndlessDocument) {
  JsonStream stream(1024);
  stream.Append("{\"a\":\"");
  for (int i = 0; i < 100 && !stream.overflowed(); ++i) {
    stream.Append(std::string(100, 'x'));
    EXPECT_EQ(stream.Next(), std::nullopt);
  }
  EXPECT_TRUE(stream.overflowed());
}

TEST(JsonStreamTest, ManyPipelinedDocuments) {
  JsonStream stream(1024);
  std::string input;
  for (int i = 0; i < 10000; ++i) input += "{\"id\":" + std::to_string(i) + "}";
  stream.Append(input);
  std::vector<std::string> documents = Drain(stream);
  ASSERT_EQ(documents.size(), 10000u);
  EXPECT_EQ(documents.back(), "{\"id\":9999}");
  EXPECT_FALSE(stream.overflowed());
}

}  // namespace
}  // namespace bexd::cli
