#include "tests/support/loop_device.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

namespace bexd::testing {

LoopDevice::LoopDevice(const std::string& backing) {
  FILE* pipe = ::popen(("losetup -f --show '" + backing + "' 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return;
  char line[256] = {};
  const bool got = std::fgets(line, sizeof(line), pipe) != nullptr;
  const int status = ::pclose(pipe);
  if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return;
  path_ = line;
  while (!path_.empty() && (path_.back() == '\n' || path_.back() == '\r')) path_.pop_back();
}

LoopDevice::~LoopDevice() {
  if (!path_.empty()) std::system(("losetup -d " + path_ + " 2>/dev/null").c_str());
}

}  // namespace bexd::testing
