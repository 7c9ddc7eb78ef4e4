// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/io_uring_fdinfo.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <string>

namespace bexd::testing {

namespace {

std::map<int, uint64_t> RegisteredBuffersOf(const std::string& fdinfo) {
  static const std::regex kBuffer(R"(\s*(\d+):\s*0x[0-9a-f]+/(\d+))");
  static const std::regex kEmpty(R"(\s*(\d+):\s*<none>)");
  std::map<int, uint64_t> lengths;
  std::ifstream info(fdinfo);
  std::string line;
  bool in_buffers = false;
  while (std::getline(info, line)) {
    if (line.rfind("UserBufs:", 0) == 0) {
      in_buffers = true;
      continue;
    }
    if (!in_buffers) continue;
    std::smatch match;
    if (std::regex_match(line, match, kBuffer)) {
      lengths[std::stoi(match[1])] = std::stoull(match[2]);
    } else if (std::regex_match(line, match, kEmpty)) {
      lengths[std::stoi(match[1])] = 0;
    } else {
      break;
    }
  }
  return lengths;
}

}  // namespace

std::vector<std::map<int, uint64_t>> IoUringRegisteredBuffers() {
  std::vector<std::map<int, uint64_t>> rings;
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) return rings;
  while (struct dirent* entry = readdir(fds)) {
    const std::string link = std::string("/proc/self/fd/") + entry->d_name;
    char target[64] = {};
    if (readlink(link.c_str(), target, sizeof(target) - 1) < 0) continue;
    if (std::string(target) != "anon_inode:[io_uring]") continue;
    rings.push_back(RegisteredBuffersOf(std::string("/proc/self/fdinfo/") + entry->d_name));
  }
  closedir(fds);
  return rings;
}

}  // namespace bexd::testing
