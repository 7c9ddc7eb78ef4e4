// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/threads.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace bexd::testing {
namespace {

std::vector<int> CpusOf(pid_t tid) {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(tid, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

}  // namespace

std::vector<pid_t> ThreadIdsNamed(std::string_view prefix) {
  std::vector<pid_t> ids;
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return ids;
  while (struct dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + entry->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind(prefix, 0) == 0) ids.push_back(static_cast<pid_t>(std::stoi(entry->d_name)));
  }
  ::closedir(tasks);
  return ids;
}

double ThreadCpuSeconds(pid_t tid) {
  std::ifstream stat_file("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  if (!std::getline(stat_file, line)) return -1;
  // The name (field 2) may hold spaces; fields 14 and 15 (utime, stime) count from after it.
  size_t name_end = line.rfind(')');
  if (name_end == std::string::npos) return -1;
  std::istringstream fields(line.substr(name_end + 1));
  std::string skipped;
  for (int field = 3; field < 14; ++field) fields >> skipped;
  unsigned long long user = 0, system = 0;
  if (!(fields >> user >> system)) return -1;
  return static_cast<double>(user + system) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::vector<int> ThreadCpus(pid_t tid) { return CpusOf(tid); }

std::vector<int> ProcessCpus() { return CpusOf(0); }

int ForbiddenCpu() {
  int cpu = 0;
  for (int allowed : ProcessCpus()) {
    if (allowed != cpu) break;
    ++cpu;
  }
  return cpu;
}

bool PinCallingThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

}  // namespace bexd::testing
