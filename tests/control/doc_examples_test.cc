// SPDX-License-Identifier: GPL-2.0-or-later
// Replays the QMP session in docs/control.md against a real bexd, so the documentation stays
// true: every "->" line is sent, every "<-" line must be matched by what comes back.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/control/control_fixture.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

// Whether `actual` contains everything in `expected` (objects: every key; arrays: same length,
// element by element; scalars: equal).
bool Contains(const json& actual, const json& expected) {
  if (expected.is_object()) {
    if (!actual.is_object()) return false;
    for (const auto& [key, value] : expected.items()) {
      if (!actual.contains(key) || !Contains(actual[key], value)) return false;
    }
    return true;
  }
  if (expected.is_array()) {
    if (!actual.is_array() || actual.size() != expected.size()) return false;
    for (size_t i = 0; i < expected.size(); ++i) {
      if (!Contains(actual[i], expected[i])) return false;
    }
    return true;
  }
  return actual == expected;
}

std::vector<std::string> SessionLines(const std::string& doc) {
  std::vector<std::string> lines;
  std::istringstream text(doc);
  std::string line;
  bool in_session = false;
  while (std::getline(text, line)) {
    if (line == "```qmp") {
      in_session = true;
    } else if (line.starts_with("```")) {
      in_session = false;
    } else if (in_session) {
      lines.push_back(line);
    }
  }
  return lines;
}

std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

TEST_F(ControlTest, DocumentedSessionWorks) {
  std::vector<std::string> lines =
      SessionLines(ReadFile(std::string(BEXD_SOURCE_DIR) + "/docs/control.md"));
  ASSERT_GT(lines.size(), 10u);
  dir_.File("null0");
  StartDaemon();
  auto client = Connect();
  for (const std::string& raw : lines) {
    std::string line = ReplaceAll(raw, "/run/bexd", dir_.path());
    ASSERT_TRUE(line.starts_with("-> ") || line.starts_with("<- ")) << line;
    json message = json::parse(line.substr(3));
    if (line.starts_with("-> ")) {
      client->SendRaw(message.dump() + "\n");
      continue;
    }
    if (message.contains("event")) {
      std::optional<json> event = client->WaitEvent(message["event"]);
      ASSERT_TRUE(event.has_value()) << line;
      EXPECT_TRUE(Contains(*event, message)) << line << "\ngot " << *event;
      continue;
    }
    // The greeting is the first message; everything else is a reply.
    json reply =
        message.contains("QMP") ? client->ReadMessage().value_or(json()) : client->ReadReply();
    EXPECT_TRUE(Contains(reply, message)) << line << "\ngot " << reply;
  }
  EXPECT_EQ(daemon_->Wait(), 0);
}

}  // namespace
}  // namespace bexd::testing
