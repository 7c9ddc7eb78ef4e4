#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Writes well-formed seed inputs for vhost_chain_fuzzer into the directory given as argument:
rings holding LOOKUP, READ (its reply crossing a region boundary) and WRITE (through an indirect
table) chains, in the input layout vhost_chain_fuzzer.cc describes."""
import os
import struct
import sys

AVAIL, DESC, USED = 0x0, 0x400, 0x1400
NEXT, WRITE, INDIRECT = 1, 2, 4
FUSE_LOOKUP, FUSE_READ, FUSE_WRITE, FUSE_GETATTR = 1, 15, 16, 3


def in_header(opcode, nodeid, body_len, unique):
    # fuse_in_header: len, opcode, unique, nodeid, uid, gid, pid, total_extlen, padding
    return struct.pack("<IIQQIIIHH", 40 + body_len, opcode, unique, nodeid, 0, 0, 0, 0, 0)


def desc(addr, length, flags, nxt):
    return struct.pack("<QIHH", addr, length, flags, nxt)


def seed(queue_log2, features, heads, descs, blobs):
    memory = bytearray(0x3000)
    memory[AVAIL:AVAIL + 4] = struct.pack("<HH", 0, len(heads))
    for i, head in enumerate(heads):
        memory[AVAIL + 4 + 2 * i:AVAIL + 6 + 2 * i] = struct.pack("<H", head)
    for index, d in descs.items():
        memory[DESC + 16 * index:DESC + 16 * index + 16] = d
    for addr, blob in blobs.items():
        if addr + len(blob) > len(memory):
            memory.extend(bytes(addr + len(blob) - len(memory)))
        memory[addr:addr + len(blob)] = blob
    return bytes([queue_log2, features]) + struct.pack("<H", 0) + bytes(memory)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    lookup = in_header(FUSE_LOOKUP, 1, 5, 2) + b"disk\0"
    read_in = struct.pack("<QQIIQII", 0, 0, 4096, 0, 0, 0, 0)
    read = in_header(FUSE_READ, 2, len(read_in), 3) + read_in
    data = bytes(range(256))
    write_in = struct.pack("<QQIIQII", 0, 4096, len(data), 0, 0, 0, 0)
    write = in_header(FUSE_WRITE, 2, len(write_in), 4) + write_in
    getattr_in = struct.pack("<IIQ", 0, 0, 0)
    getattr_ = in_header(FUSE_GETATTR, 2, len(getattr_in), 5) + getattr_in
    table = (desc(0x2200, len(write), NEXT, 1) + desc(0x2300, len(data), NEXT, 2) +
             desc(0x2a00, 24, WRITE, 0))
    descs = {
        0: desc(0x2000, len(lookup), NEXT, 1),
        1: desc(0x2800, 16 + 128, WRITE, 0),
        2: desc(0x2100, len(read), NEXT, 3),
        3: desc(0x7f00, 16 + 4096, WRITE, 0),  # crosses 0x8000 into the second region
        4: desc(0x2400, len(table), INDIRECT, 0),
        5: desc(0x2500, len(getattr_), NEXT, 6),
        6: desc(0x20000, 16 + 104, WRITE, 0),  # the third region
    }
    blobs = {0x2000: lookup, 0x2100: read, 0x2200: write, 0x2300: data, 0x2400: table,
             0x2500: getattr_}
    seeds = {
        "lookup_read_write": seed(3, 3, [0, 2, 4, 5], descs, blobs),
        "direct_only": seed(4, 1, [0, 2, 5], descs, blobs),
        "no_event_idx": seed(2, 2, [4, 0], descs, blobs),
    }
    for name, content in seeds.items():
        with open(os.path.join(out, "seed_" + name), "wb") as f:
            f.write(content)


if __name__ == "__main__":
    main()
