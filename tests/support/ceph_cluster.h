// SPDX-License-Identifier: GPL-2.0-or-later
// A throwaway single-node Ceph cluster for one test (tests/support/ceph-cluster.sh): a monitor
// and an OSD on 127.0.0.1 under a fresh directory, with pool "rbd", started by the constructor
// and killed and removed by the destructor. Clients use conf(); its rados_osd_op_timeout is 5 s.
#pragma once

#include <signal.h>

#include <string>

namespace bexd::testing {

class CephCluster {
 public:
  // memstore starts fastest; bluestore keeps its data across KillOsd() and StartOsd().
  enum class Store { kMemstore, kBluestore };

  // Why the cluster cannot run here (not root, Ceph not installed), or empty.
  static std::string SkipReason();

  explicit CephCluster(Store store = Store::kMemstore);
  ~CephCluster();
  CephCluster(const CephCluster&) = delete;
  CephCluster& operator=(const CephCluster&) = delete;

  // Whether it started; if not, error() has the script's output.
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }
  std::string conf() const { return dir_ + "/ceph.conf"; }

  // `rbd ARGS` / `ceph ARGS` against this cluster: their output; *status their exit status.
  std::string Rbd(const std::string& args, int* status) const;
  std::string Ceph(const std::string& args, int* status) const;
  // Creates image "rbd/NAME" of `size` bytes; false (with a gtest failure) if that fails.
  bool CreateImage(const std::string& name, uint64_t size) const;
  // The image's bytes as `rbd export` writes them.
  std::string ExportImage(const std::string& spec) const;

  // Creates client.NAME with these capabilities ("mon 'profile rbd' osd '...'"); its key as
  // `ceph auth get-key` prints it (base64), or empty with a gtest failure.
  std::string CreateUser(const std::string& name, const std::string& caps) const;
  // The key of client.NAME, as CreateUser returns it.
  std::string Key(const std::string& name) const;
  // Writes DIR/NAME: the client part of conf(), less the admin keyring (so a key must come from
  // elsewhere) and, with `mon_host` false, less `mon host`. Returns its path.
  std::string WriteClientConf(const std::string& name, bool mon_host) const;
  // The monitor's port.
  std::string MonPort() const;

  // SIGKILLs the OSD; StartOsd starts it again and waits until the monitor has it up.
  bool KillOsd();
  bool StartOsd();
  // SIGSTOPs / SIGCONTs the OSD: it stops answering, with its connections open.
  bool PauseOsd() const { return SignalOsd(SIGSTOP); }
  bool ResumeOsd() const { return SignalOsd(SIGCONT); }

 private:
  std::string Script(const std::string& args, int* status) const;
  bool SignalOsd(int signal) const;

  std::string dir_;
  bool ok_ = false;
  std::string error_;
};

}  // namespace bexd::testing
