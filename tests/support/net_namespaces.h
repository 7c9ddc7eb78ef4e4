// SPDX-License-Identifier: GPL-2.0-or-later
// Network namespaces for tests that play several hosts on one machine: a hub namespace (the
// store) linked to each of the others by a veth pair with private addresses that exist only
// inside the namespaces. Everything is deleted on destruction; processes started in them must be
// gone first (a namespace with live processes outlives `ip netns del`).
#pragma once

#include <string>
#include <vector>

namespace bexd::testing {

class NetNamespaces {
 public:
  // The hub and `spokes` more namespaces, named after this process so that parallel test runs
  // never meet. ok() says whether all of them and their links came up; error() says why not.
  explicit NetNamespaces(int spokes);
  ~NetNamespaces();
  NetNamespaces(const NetNamespaces&) = delete;
  NetNamespaces& operator=(const NetNamespaces&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // Arguments that run a program inside the hub or spoke `i` (nsenter, network namespace only:
  // mounts made there stay visible to the test).
  std::vector<std::string> InHub() const { return Enter(names_[0]); }
  std::vector<std::string> InSpoke(int i) const { return Enter(names_[i + 1]); }
  // The hub's address on its link to spoke `i`, as that spoke reaches it.
  std::string HubAddress(int i) const;

  // Why network namespaces cannot be made here ("" if they can): not root, no `ip` or `nsenter`.
  static std::string SkipReason();

 private:
  static std::vector<std::string> Enter(const std::string& name);
  bool Run(const std::string& command);

  std::vector<std::string> names_;  // hub first
  std::string error_;
};

}  // namespace bexd::testing
