#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Prints the per-queue counters of one bexd export, read over QMP with x-query-export-stats.

Usage: export-stats.py QMP_SOCKET EXPORT_ID

One line per queue thread, in the order bexd reports them (for a vhost-user-fs export: the hiprio
ring first, then request queues 1..N): "INDEX REQUESTS READ_REQUESTS WRITE_REQUESTS ERRORS".
Exits 1 with a message on stderr when the daemon cannot be asked or answers with an error.
"""

import json
import socket
import sys


def command(stream, name, arguments=None):
    request = {"execute": name}
    if arguments:
        request["arguments"] = arguments
    stream.write(json.dumps(request) + "\n")
    stream.flush()
    for line in stream:
        reply = json.loads(line)
        if "event" in reply:
            continue
        if "error" in reply:
            sys.exit(f"export-stats: {name}: {reply['error'].get('desc', reply['error'])}")
        return reply["return"]
    sys.exit(f"export-stats: the daemon closed the connection before answering {name}")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: export-stats.py QMP_SOCKET EXPORT_ID")
    path, export_id = sys.argv[1:]
    with socket.socket(socket.AF_UNIX) as connection:
        connection.settimeout(10)
        try:
            connection.connect(path)
        except OSError as error:
            sys.exit(f"export-stats: cannot connect to {path}: {error}")
        stream = connection.makefile("rw")
        json.loads(stream.readline())  # the greeting
        command(stream, "qmp_capabilities")
        exports = command(stream, "x-query-export-stats", {"id": export_id})
    if len(exports) != 1 or "queues" not in exports[0]:
        sys.exit(f"export-stats: no per-queue counters for export '{export_id}': {exports}")
    for index, queue in enumerate(exports[0]["queues"]):
        print(index, queue["requests"], queue["read-requests"], queue["write-requests"],
              queue["errors"])


if __name__ == "__main__":
    main()
