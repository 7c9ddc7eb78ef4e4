// SPDX-License-Identifier: GPL-2.0-or-later
// Where the backing file named in an image header is, as QEMU resolves it.
#pragma once

#include <absl/status/statusor.h>

#include <string>
#include <string_view>

namespace bexd::block::qcow2 {

// An absolute name stands for itself; a relative one is relative to the directory of the image's
// file name as the image was opened (not canonicalised: QEMU combines the two strings), or to the
// working directory if that name has no directory. "file:" is dropped; any other protocol prefix
// ("nbd:", "json:") does not name a local file and fails: the backing node must then be given.
absl::StatusOr<std::string> ResolveBackingFileName(std::string_view image_filename,
                                                   std::string_view backing_name);

}  // namespace bexd::block::qcow2
