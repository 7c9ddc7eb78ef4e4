// SPDX-License-Identifier: GPL-2.0-or-later
// Option text as the parsers see it, for the option tests.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string_view>

#include "cli/config/keyval.h"

namespace bexd::cli {

// `text` in QEMU's key=value syntax as JSON (a test failure if it does not parse).
inline nlohmann::json Keyval(std::string_view text, std::string_view implied = {}) {
  absl::StatusOr<nlohmann::json> parsed = ParseKeyval(text, implied);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : nlohmann::json::object();
}

}  // namespace bexd::cli
