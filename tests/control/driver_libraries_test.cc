// SPDX-License-Identifier: GPL-2.0-or-later
// The rbd and nbd drivers' client libraries are loaded by the first node of their driver, not at
// start-up (block/shared_library.h): a daemon without such nodes maps none of them.
#include <dlfcn.h>
#include <link.h>

#include <gtest/gtest.h>

#include <string>

#include "tests/control/control_fixture.h"
#include "tests/support/run_command.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

bool Maps(pid_t pid, const std::string& library) {
  return ReadFile("/proc/" + std::to_string(pid) + "/maps").find("/" + library) !=
         std::string::npos;
}

TEST_F(ControlTest, RemoteDriverLibrariesLoadWithTheirFirstNode) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  const pid_t pid = daemon_->pid();
  for (const char* library : {"librbd.so", "librados.so", "libceph-common.so", "libnbd.so"}) {
    EXPECT_FALSE(Maps(pid, library)) << library << " is mapped by a daemon with a file node";
  }

  // Both opens fail after their library is loaded: Ceph's configuration file and the NBD
  // server's socket do not exist.
  json reply = client->Execute("blockdev-add", {{"driver", "rbd"},
                                                {"node-name", "rbd0"},
                                                {"pool", "rbd"},
                                                {"image", "disk"},
                                                {"conf", Path("missing.conf")}});
  EXPECT_EQ(ErrorClass(reply), "GenericError") << reply.dump();
  EXPECT_NE(ErrorDesc(reply).find("rbd0"), std::string::npos) << reply.dump();
  EXPECT_TRUE(Maps(pid, "librbd.so.1"));
  EXPECT_TRUE(Maps(pid, "librados.so.2"));
  EXPECT_FALSE(Maps(pid, "libnbd.so"));

  reply = client->Execute("blockdev-add",
                          {{"driver", "nbd"},
                           {"node-name", "nbd0"},
                           {"server", {{"type", "unix"}, {"path", Path("missing.sock")}}}});
  EXPECT_EQ(ErrorClass(reply), "GenericError") << reply.dump();
  EXPECT_NE(ErrorDesc(reply).find("nbd0"), std::string::npos) << reply.dump();
  EXPECT_TRUE(Maps(pid, "libnbd.so.0"));

  // The daemon still serves: its file node and export are untouched.
  EXPECT_EQ(Success(client->Execute("query-block-exports")), "");
  EXPECT_TRUE(daemon_->running());
}

// The file the dynamic loader opens for `soname`, or "" if it has none.
std::string LibraryFile(const char* soname) {
  void* library = ::dlopen(soname, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (library == nullptr) library = ::dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
  if (library == nullptr) return "";
  link_map* map = nullptr;
  std::string path;
  if (::dlinfo(library, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr) path = map->l_name;
  ::dlclose(library);
  return path;
}

// A host without librbd: in a mount namespace of its own, the library's file is hidden under
// /dev/null. An rbd node fails with a line that names the node, the driver and the library; the
// other drivers still work.
TEST_F(ControlTest, WithoutLibrbdAnRbdNodeFailsClearlyAndOthersWork) {
  const std::string librbd = LibraryFile("librbd.so.1");
  if (librbd.empty()) GTEST_SKIP() << "librbd.so.1 is not installed";
  const std::string mountpoint = dir_.File("export");
  const std::string hide =
      "unshare --mount sh -c 'mount --bind /dev/null " + librbd + " || exit 9; ";
  int status = 0;
  std::string out = RunCommand(
      hide + BEXD_BINARY + " --blockdev driver=rbd,node-name=r0,pool=rbd,image=disk'", &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("node 'r0': driver 'rbd' needs librbd.so.1, which cannot be loaded"),
            std::string::npos)
      << out;

  // A null export serves in the same kind of namespace: the daemon never touches librbd.
  out =
      RunCommand(hide + BEXD_BINARY + " --blockdev driver=null-co,node-name=n0,size=1M" +
                     " --export type=fuse,id=e0,node-name=n0,mountpoint=" + mountpoint +
                     " --pidfile " + Path("pid") + " & pid=$!; " + "for i in $(seq 100); do [ -s " +
                     Path("pid") + " ] && break; sleep 0.1; done; " + "head -c 4096 " + mountpoint +
                     " | wc -c; kill $pid; wait $pid'",
                 &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("4096"), std::string::npos) << out;
}

}  // namespace
}  // namespace bexd::testing
