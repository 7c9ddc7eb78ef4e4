#include "tests/support/threads.h"

#include <dirent.h>
#include <sched.h>

#include <fstream>
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

}  // namespace bexd::testing
