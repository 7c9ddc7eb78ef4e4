// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/shared_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

namespace bexd::block {

absl::StatusOr<void*> OpenSharedLibrary(const char* soname, std::string_view driver) {
  void* library = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    return absl::FailedPreconditionError(fmt::format(
        "driver '{}' needs {}, which cannot be loaded: {}", driver, soname, ::dlerror()));
  }
  return library;
}

absl::Status ResolveFunction(void* library, const char* soname, const char* name, void** function) {
  ::dlerror();
  *function = ::dlsym(library, name);
  if (*function == nullptr) {
    const char* error = ::dlerror();
    return absl::FailedPreconditionError(fmt::format("{} has no function {}: {}", soname, name,
                                                     error != nullptr ? error : "null address"));
  }
  return absl::OkStatus();
}

}  // namespace bexd::block
