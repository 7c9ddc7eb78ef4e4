// SPDX-License-Identifier: GPL-2.0-or-later
// query-qmp-schema: QEMU's SchemaInfo list for the commands and events bexd implements, so
// clients that introspect before they call (qemu.qmp users, libvirt-style probes) find them.
#pragma once

#include <nlohmann/json.hpp>

namespace bexd::cli {

nlohmann::json QmpSchema();

}  // namespace bexd::cli
