"""The hub <-> worker protocol: length-prefixed JSON messages over a Unix socket.

A socket, not stdin/stdout: a worker may run under compute-sanitizer, whose reports
go to the worker's stdout, and those must not mix with our messages.

hub -> worker: {"type": "run", "case": {...}, "oracles": [...]}, {"type": "exit"}
worker -> hub: {"type": "ready", "pid", "device"}, {"type": "op", "index", "op"},
               {"type": "launch", "kernel"}, {"type": "partial", "violations"},
               {"type": "result", "violations", "seconds"}, {"type": "invalid", "message"},
               {"type": "harness", "message"}
"""

from __future__ import annotations

import json
import socket
import struct

_HEADER = struct.Struct("!I")


def send(sock: socket.socket, msg: dict) -> None:
    data = json.dumps(msg).encode()
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def recv(sock: socket.socket) -> dict:
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    return json.loads(_recv_exact(sock, n))
