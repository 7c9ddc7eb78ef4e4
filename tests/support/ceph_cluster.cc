// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/ceph_cluster.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/run_command.h"

namespace bexd::testing {
namespace {

// Whether every thread of `pid` is in state T (stopped), from /proc/PID/task/*/stat.
bool AllThreadsStopped(pid_t pid) {
  std::error_code error;
  std::filesystem::directory_iterator tasks("/proc/" + std::to_string(pid) + "/task", error);
  if (error) return false;
  for (const auto& task : tasks) {
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // The state follows the command name, which is in parentheses and may hold anything.
    const size_t name_end = line.rfind(')');
    if (name_end == std::string::npos || name_end + 2 >= line.size()) return false;
    if (line[name_end + 2] != 'T') return false;
  }
  return true;
}

}  // namespace

std::string CephCluster::SkipReason() {
  if (::geteuid() != 0) return "the Ceph test cluster needs root";
  for (const char* binary : {"/usr/bin/ceph-mon", "/usr/bin/ceph-osd", "/usr/bin/rbd"}) {
    if (::access(binary, X_OK) != 0) {
      return std::string(binary) + " is missing (scripts/deps.txt: ceph-mon ceph-osd ceph-common)";
    }
  }
  return "";
}

CephCluster::CephCluster(Store store) {
  // Short: the daemons' admin socket paths must stay under about 107 bytes.
  char pattern[] = "/tmp/ceph-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = pattern;
  int status = -1;
  std::string output = Script(
      std::string("start ") + dir_ + (store == Store::kBluestore ? " bluestore" : " memstore"),
      &status);
  ok_ = status == 0;
  if (!ok_) error_ = output;
}

CephCluster::~CephCluster() {
  if (dir_.empty()) return;
  int status = -1;
  std::string output = Script("stop " + dir_, &status);
  if (status != 0) ADD_FAILURE() << "stopping the Ceph cluster in " << dir_ << ": " << output;
}

std::string CephCluster::Script(const std::string& args, int* status) const {
  return RunCommand(std::string(BEXD_SOURCE_DIR) + "/tests/support/ceph-cluster.sh " + args,
                    status);
}

std::string CephCluster::Rbd(const std::string& args, int* status) const {
  return RunCommand("rbd -c " + conf() + " " + args, status);
}

std::string CephCluster::Ceph(const std::string& args, int* status) const {
  return RunCommand("ceph -c " + conf() + " " + args, status);
}

bool CephCluster::CreateImage(const std::string& name, uint64_t size) const {
  int status = -1;
  std::string output = Rbd("create --size " + std::to_string(size) + "B rbd/" + name, &status);
  EXPECT_EQ(status, 0) << output;
  return status == 0;
}

std::string CephCluster::ExportImage(const std::string& spec) const {
  const std::string file = dir_ + "/export.bin";
  std::filesystem::remove(file);
  int status = -1;
  std::string output = Rbd("export --no-progress " + spec + " " + file, &status);
  EXPECT_EQ(status, 0) << output;
  std::ifstream in(file, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::filesystem::remove(file);
  return bytes.str();
}

std::string CephCluster::CreateUser(const std::string& name, const std::string& caps) const {
  int status = -1;
  std::string output = Ceph("auth get-or-create client." + name + " " + caps, &status);
  EXPECT_EQ(status, 0) << output;
  return status == 0 ? Key(name) : "";
}

std::string CephCluster::Key(const std::string& name) const {
  int status = -1;
  std::string key = Ceph("auth get-key client." + name, &status);
  EXPECT_EQ(status, 0) << key;
  while (!key.empty() && (key.back() == '\n' || key.back() == ' ')) key.pop_back();
  return status == 0 ? key : "";
}

std::string CephCluster::WriteClientConf(const std::string& name, bool mon_host) const {
  const std::string path = dir_ + "/" + name;
  std::ifstream full(conf());
  std::ofstream client(path);
  std::string line;
  while (std::getline(full, line)) {
    if (line.starts_with("[mon.")) break;  // the daemons' sections follow [global]
    if (line.starts_with("keyring") || (!mon_host && line.starts_with("mon host"))) continue;
    client << line << "\n";
  }
  client << "keyring = " << dir_ << "/no-such-keyring\n";
  return path;
}

std::string CephCluster::MonPort() const {
  std::ifstream full(conf());
  std::string line;
  while (std::getline(full, line)) {
    if (line.starts_with("mon host = ")) return line.substr(line.rfind(':') + 1);
  }
  ADD_FAILURE() << "no mon host in " << conf();
  return "";
}

bool CephCluster::SignalOsd(int signal) const {
  std::ifstream pidfile(dir_ + "/osd.pid");
  pid_t pid = 0;
  pidfile >> pid;
  EXPECT_GT(pid, 0) << "no OSD pid in " << dir_;
  const bool sent = pid > 0 && ::kill(pid, signal) == 0;
  EXPECT_TRUE(sent) << "cannot signal the OSD (pid " << pid << ")";
  if (!sent || signal != SIGSTOP) return sent;
  // kill() returns before the stop: a thread running on another CPU, or waiting for one on a
  // loaded machine, may still take a request. Paused means every thread is stopped.
  for (int attempt = 0; attempt < 500; ++attempt) {
    if (AllThreadsStopped(pid)) return true;
    ::usleep(10'000);
  }
  ADD_FAILURE() << "the OSD (pid " << pid << ") did not stop within 5 s of SIGSTOP";
  return false;
}

bool CephCluster::KillOsd() {
  int status = -1;
  std::string output = Script("kill-osd " + dir_, &status);
  EXPECT_EQ(status, 0) << output;
  return status == 0;
}

bool CephCluster::StartOsd() {
  int status = -1;
  std::string output = Script("start-osd " + dir_, &status);
  EXPECT_EQ(status, 0) << output;
  return status == 0;
}

}  // namespace bexd::testing
