// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/net_namespaces.h"

#include <unistd.h>

#include "tests/support/nbd_server.h"
#include "tests/support/run_command.h"

namespace bexd::testing {
namespace {

// 10.231.<spoke + 1>.0/24 per link: hub .1, spoke .2.
std::string LinkAddress(int spoke, int host) {
  return "10.231." + std::to_string(spoke + 1) + "." + std::to_string(host);
}

}  // namespace

NetNamespaces::NetNamespaces(int spokes) {
  const std::string prefix = "bexd-" + std::to_string(::getpid()) + "-";
  names_.push_back(prefix + "hub");
  for (int i = 0; i < spokes; ++i) names_.push_back(prefix + std::to_string(i));
  for (const std::string& name : names_) {
    if (!Run("ip netns add " + name) || !Run("ip -n " + name + " link set lo up")) return;
  }
  const std::string& hub = names_[0];
  for (int i = 0; i < spokes; ++i) {
    const std::string& spoke = names_[i + 1];
    // Made inside the hub with the peer placed straight into the spoke: the interfaces never
    // appear in the test's own namespace, so their names cannot clash with anyone's.
    const std::string hub_if = "hub" + std::to_string(i);
    if (!Run("ip -n " + hub + " link add " + hub_if + " type veth peer name uplink netns " +
             spoke) ||
        !Run("ip -n " + hub + " addr add " + LinkAddress(i, 1) + "/24 dev " + hub_if) ||
        !Run("ip -n " + spoke + " addr add " + LinkAddress(i, 2) + "/24 dev uplink") ||
        !Run("ip -n " + hub + " link set " + hub_if + " up") ||
        !Run("ip -n " + spoke + " link set uplink up")) {
      return;
    }
  }
}

NetNamespaces::~NetNamespaces() {
  // Deleting a namespace removes its end of every veth pair, and with it the peer.
  for (const std::string& name : names_) {
    int status = 0;
    RunCommand("ip netns del " + name, &status);
  }
}

std::string NetNamespaces::HubAddress(int i) const { return LinkAddress(i, 1); }

std::string NetNamespaces::SkipReason() {
  if (::geteuid() != 0) return "network namespaces need root";
  if (!HaveProgram("ip") || !HaveProgram("nsenter"))
    return "ip (iproute2) or nsenter (util-linux) is missing";
  return "";
}

std::vector<std::string> NetNamespaces::Enter(const std::string& name) {
  return {"nsenter", "--net=/run/netns/" + name};
}

bool NetNamespaces::Run(const std::string& command) {
  int status = 0;
  const std::string output = RunCommand(command, &status);
  if (status != 0) error_ = "`" + command + "` failed: " + output;
  return status == 0;
}

}  // namespace bexd::testing
