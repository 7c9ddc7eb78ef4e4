// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/loop_device.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

namespace bexd::testing {
namespace {

// First line of a command's output, or "" if it failed.
std::string Capture(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  char line[512] = {};
  bool got = ::fgets(line, sizeof(line), pipe) != nullptr;
  int status = ::pclose(pipe);
  if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return "";
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace

LoopDevice::LoopDevice(const std::string& backing)
    : path_(Capture("losetup -f --show '" + backing + "' 2>/dev/null")) {}

LoopDevice::LoopDevice(const std::string& backing, const Window& window)
    : path_(Capture("losetup -f --show --offset " + std::to_string(window.offset) +
                    " --sizelimit " + std::to_string(window.size) +
                    (window.read_only ? " --read-only '" : " '") + backing + "' 2>/dev/null")) {}

LoopDevice::~LoopDevice() {
  if (path_.empty()) return;
  // Best effort: a failure leaves a loop device behind, not a wrong test result.
  [[maybe_unused]] int status = std::system(("losetup -d " + path_ + " 2>/dev/null").c_str());
}

}  // namespace bexd::testing
