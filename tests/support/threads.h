// SPDX-License-Identifier: GPL-2.0-or-later
// This process's threads as /proc shows them: found by name, and the CPUs each may run on.
#pragma once

#include <sys/types.h>

#include <string_view>
#include <vector>

namespace bexd::testing {

// The thread ids whose name (comm) starts with `prefix`.
std::vector<pid_t> ThreadIdsNamed(std::string_view prefix);

// The CPU time (user + system, in seconds) thread `tid` of this process has used; -1 if it cannot
// be read.
double ThreadCpuSeconds(pid_t tid);

// The CPUs thread `tid` of this process may run on; empty if it cannot be asked.
std::vector<int> ThreadCpus(pid_t tid);

// The CPUs this process may run on.
std::vector<int> ProcessCpus();

// The lowest CPU number this process may not run on.
int ForbiddenCpu();

// Keeps the calling thread on `cpu` from now on; false if the kernel refused.
bool PinCallingThread(int cpu);

}  // namespace bexd::testing
