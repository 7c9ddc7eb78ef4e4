// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/queue/queue_cpus.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace bexd::exports {
namespace {

// Reads a CPU number from the front of `text`, leaving the rest.
bool TakeCpu(std::string_view* text, int* cpu) {
  if (text->empty() || text->front() < '0' || text->front() > '9') return false;
  const char* end = text->data() + text->size();
  const auto [next, error] = std::from_chars(text->data(), end, *cpu);
  if (error != std::errc() || next == text->data()) return false;
  text->remove_prefix(static_cast<size_t>(next - text->data()));
  return true;
}

absl::Status Invalid(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(fmt::format("'{}' is not a CPU list: {}", text, why));
}

}  // namespace

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text) {
  std::vector<int> cpus;
  std::string_view rest = text;
  while (true) {
    int first = 0;
    if (!TakeCpu(&rest, &first)) {
      return Invalid(text, "expected CPU numbers or ranges such as 0-3, separated by commas");
    }
    int last = first;
    if (!rest.empty() && rest.front() == '-') {
      rest.remove_prefix(1);
      if (!TakeCpu(&rest, &last)) return Invalid(text, "a range needs an end, as in 0-3");
      if (last < first) {
        return Invalid(text, fmt::format("the range {}-{} runs backwards", first, last));
      }
    }
    if (last >= CPU_SETSIZE) {
      return Invalid(text, fmt::format("CPU {} is above the limit of {}", last, CPU_SETSIZE - 1));
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    if (rest.empty()) break;
    if (rest.front() != ',') {
      return Invalid(text, "expected CPU numbers or ranges such as 0-3, separated by commas");
    }
    rest.remove_prefix(1);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return text;
}

absl::Status CheckQueueCpus(const std::vector<int>& cpus) {
  const std::vector<int> allowed = AllowedCpus();
  for (int cpu : cpus) {
    if (!std::binary_search(allowed.begin(), allowed.end(), cpu)) {
      return absl::InvalidArgumentError(
          fmt::format("queue-cpus: CPU {} is not one bexd may run on (allowed: {})", cpu,
                      allowed.empty() ? "unknown" : FormatCpuList(allowed)));
    }
  }
  return absl::OkStatus();
}

std::string DescribeQueueCpus(const std::vector<int>& cpus) {
  return cpus.empty() ? "" : fmt::format(" on CPUs {}", FormatCpuList(cpus));
}

absl::Status PinCurrentThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const int error = ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set);
  if (error != 0) {
    return absl::InternalError(
        fmt::format("cannot pin the thread to CPU {}: {}", cpu, std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace bexd::exports
