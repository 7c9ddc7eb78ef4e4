// SPDX-License-Identifier: GPL-2.0-or-later
// Loading a driver's client library: the errors name the driver, the library and the function.
#include "block/shared_library.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace bexd::block {
namespace {

TEST(SharedLibraryTest, MissingLibraryNamesTheDriverAndTheLibrary) {
  absl::StatusOr<void*> library = OpenSharedLibrary("libbexd-missing.so.7", "rbd");
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(library.status().message().find("driver 'rbd' needs libbexd-missing.so.7"),
            std::string::npos)
      << library.status();
}

TEST(SharedLibraryTest, ResolvesFunctionsAndNamesAMissingOne) {
  absl::StatusOr<void*> libc = OpenSharedLibrary("libc.so.6", "test");
  ASSERT_TRUE(libc.ok()) << libc.status();

  decltype(&::strlen) length = nullptr;
  ASSERT_TRUE(Resolve(*libc, "libc.so.6", "strlen", &length).ok());
  EXPECT_EQ(length("four"), 4u);

  decltype(&::strlen) missing = &::strlen;
  absl::Status status = Resolve(*libc, "libc.so.6", "bexd_no_such_function", &missing);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("libc.so.6 has no function bexd_no_such_function"),
            std::string::npos)
      << status;
  EXPECT_EQ(missing, nullptr);
}

}  // namespace
}  // namespace bexd::block
