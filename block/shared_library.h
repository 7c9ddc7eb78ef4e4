// SPDX-License-Identifier: GPL-2.0-or-later
// A driver's client library (librbd, libnbd) opened with dlopen when the first node of that driver
// opens, as QEMU loads its block-rbd module. A daemon that serves no such node then neither maps
// the library (Ceph's client libraries alone are about 12 MiB resident) nor runs its start-up.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <string_view>

namespace bexd::block {

// One pointer per C function a driver calls, named as the function, for a struct of them.
#define BEXD_FUNCTION_POINTER(name) decltype(&::name) name = nullptr;

// dlopen of `soname` (the library's major version, the ABI the driver was built against). The
// handle is never closed: its functions may run on the library's own threads until exit.
absl::StatusOr<void*> OpenSharedLibrary(const char* soname, std::string_view driver);

// dlsym of `name` into `*function`.
absl::Status ResolveFunction(void* library, const char* soname, const char* name, void** function);

template <typename Function>
absl::Status Resolve(void* library, const char* soname, const char* name, Function* function) {
  void* address = nullptr;
  absl::Status status = ResolveFunction(library, soname, name, &address);
  *function = reinterpret_cast<Function>(address);
  return status;
}

}  // namespace bexd::block
