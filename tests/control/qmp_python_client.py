#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A QMP client that talks as QEMU's python library qemu.qmp does, for QmpPythonClientTest.

qemu.qmp frames strictly: every message it accepts is one line ending in a newline, parsed as a
whole JSON object; it sends each command as a JSON object with no trailing newline and a string
id ("__qmp#00000", counting up), and expects the reply to carry that id back. It checks the
greeting's shape before negotiating. This client does the same and fails loudly on anything
else, so a bexd that only works with lenient clients fails the test.

Usage: qmp_python_client.py SOCKET FILE_NODE EXPORT_ID MOUNTPOINT
Drives the daemon through the calls a management script makes, and exits 0 only if each reply
is what QEMU's storage daemon would send. The export EXPORT_ID of node FILE_NODE must exist;
MOUNTPOINT is a fresh regular file for a second export.
"""

import json
import socket
import sys


class QmpError(Exception):
    pass


class Client:
    def __init__(self, path):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(60)
        self._sock.connect(path)
        self._reader = self._sock.makefile("rb")
        self._counter = 0
        self.events = []

    def _read_message(self):
        line = self._reader.readline()
        if not line:
            raise QmpError("connection closed")
        if not line.endswith(b"\n"):
            raise QmpError(f"message not terminated by a newline: {line!r}")
        message = json.loads(line)  # one line must hold one whole message
        if not isinstance(message, dict):
            raise QmpError(f"message is not a JSON object: {line!r}")
        return message

    def greeting(self):
        message = self._read_message()
        qmp = message.get("QMP")
        if set(message) != {"QMP"} or set(qmp) != {"version", "capabilities"}:
            raise QmpError(f"bad greeting: {message}")
        version = qmp["version"]
        if not all(isinstance(version["qemu"][k], int) for k in ("major", "minor", "micro")):
            raise QmpError(f"bad greeting version: {version}")
        if not isinstance(version["package"], str) or not isinstance(qmp["capabilities"], list):
            raise QmpError(f"bad greeting: {message}")
        return message

    def execute_raw(self, command, arguments=None):
        """The reply to `command`, error or not; events that arrive first are kept."""
        request_id = f"__qmp#{self._counter:05d}"
        self._counter += 1
        request = {"execute": command, "id": request_id}
        if arguments is not None:
            request["arguments"] = arguments
        self._sock.sendall(json.dumps(request, separators=(",", ":")).encode())
        while True:
            message = self._read_message()
            if "event" in message:
                self.events.append(message)
                continue
            if message.get("id") != request_id:
                raise QmpError(f"reply to {request_id} carries id {message.get('id')!r}")
            if ("return" in message) == ("error" in message):
                raise QmpError(f"reply is neither a return nor an error: {message}")
            return message

    def execute(self, command, arguments=None):
        reply = self.execute_raw(command, arguments)
        if "error" in reply:
            raise QmpError(f"{command}: {reply['error']}")
        return reply["return"]

    def wait_event(self, name):
        while True:
            for event in self.events:
                if event["event"] == name:
                    self.events.remove(event)
                    return event
            message = self._read_message()
            if "event" not in message:
                raise QmpError(f"unexpected message while waiting for {name}: {message}")
            self.events.append(message)

    def close(self):
        self._reader.close()
        self._sock.close()


def expect(what, actual, expected):
    if actual != expected:
        raise QmpError(f"{what}: got {actual!r}, expected {expected!r}")


def main():
    path, file_node, export_id, mountpoint = sys.argv[1:5]
    client = Client(path)
    client.greeting()
    expect("qmp_capabilities", client.execute("qmp_capabilities"), {})

    version = client.execute("query-version")
    expect("query-version keys", sorted(version), ["package", "qemu"])
    commands = {entry["name"] for entry in client.execute("query-commands")}
    for name in ("query-named-block-nodes", "block-export-add", "query-block-exports"):
        expect(f"{name} in query-commands", name in commands, True)

    nodes = client.execute("query-named-block-nodes")
    node = next(n for n in nodes if n["node-name"] == file_node)
    expect("drv", node["drv"], "file")
    expect("file is the image path", node["file"], node["image"]["filename"])
    expect("ro", node["ro"], False)
    for field in ("bps", "bps_rd", "bps_wr", "iops", "iops_rd", "iops_wr", "write_threshold"):
        expect(field, node[field], 0)
    expect("cache keys", sorted(node["cache"]), ["direct", "no-flush", "writeback"])

    client.execute("blockdev-add", {"driver": "null-co", "node-name": "pynull", "size": 1 << 20})
    client.execute(
        "block-export-add",
        {"type": "fuse", "id": "pyexp", "node-name": "pynull", "mountpoint": mountpoint},
    )
    exports = sorted(client.execute("query-block-exports"), key=lambda e: e["id"])
    expect(
        "query-block-exports",
        exports,
        [
            {"type": "fuse", "id": export_id, "node-name": file_node, "shutting-down": False},
            {"type": "fuse", "id": "pyexp", "node-name": "pynull", "shutting-down": False},
        ],
    )
    client.execute("block-export-del", {"id": "pyexp"})
    expect("BLOCK_EXPORT_DELETED", client.wait_event("BLOCK_EXPORT_DELETED")["data"], {"id": "pyexp"})
    client.execute("blockdev-del", {"node-name": "pynull"})

    reply = client.execute_raw("human-monitor-command", {"command-line": "info block"})
    expect("human-monitor-command", reply["error"]["class"], "CommandNotFound")
    reply = client.execute_raw("blockdev-del", {"node-name": "pynull"})
    expect("blockdev-del of a deleted node", reply["error"]["class"], "GenericError")
    client.close()
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except (QmpError, KeyError, StopIteration, OSError, ValueError) as error:
        print(f"FAIL: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
