// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/run_command.h"

#include <sys/wait.h>

#include <cstdio>

namespace bexd::testing {

std::string RunCommand(const std::string& command, int* exit_status) {
  // The whole command under the limit, also when it is a list such as "cd dir && ...".
  std::string quoted = "'";
  for (char c : command) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  std::string output;
  FILE* pipe = ::popen(("timeout -k 10 180 sh -c " + quoted + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    *exit_status = -1;
    return output;
  }
  char chunk[4096];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0) output.append(chunk, n);
  const int status = ::pclose(pipe);
  *exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

}  // namespace bexd::testing
