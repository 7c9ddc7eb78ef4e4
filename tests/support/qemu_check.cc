// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/qemu_check.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"

namespace bexd::testing {

CheckResult QemuCheck(const std::string& image) {
  CheckResult result;
  // RunCommand merges stderr into the output; the inner shell keeps it out.
  result.output = RunCommand("sh -c \"qemu-img check --output=json '" + image + "' 2>/dev/null\"",
                             &result.exit_status);
  auto json = nlohmann::json::parse(result.output, nullptr, /*allow_exceptions=*/false);
  if (json.is_object()) {
    result.corruptions = json.value("corruptions", uint64_t{0});
    result.leaks = json.value("leaks", uint64_t{0});
  } else {
    ADD_FAILURE() << "qemu-img check of " << image << " gave no JSON report: " << result.output;
  }
  return result;
}

}  // namespace bexd::testing
