// SPDX-License-Identifier: GPL-2.0-or-later
// `qemu-img check` of an image: QEMU's own verdict on the metadata bexd wrote.
#pragma once

#include <cstdint>
#include <string>

namespace bexd::testing {

struct CheckResult {
  int exit_status = 0;  // 0 clean, 2 corruptions, 3 leaks only
  std::string output;   // the JSON report
  uint64_t corruptions = 0;
  uint64_t leaks = 0;
};

// Runs `qemu-img check --output=json` on `image`; a gtest failure if it prints no JSON report.
// Only stdout is parsed: qemu-img lists leaked clusters on stderr before the report.
CheckResult QemuCheck(const std::string& image);

}  // namespace bexd::testing
