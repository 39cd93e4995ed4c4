"""The hub <-> worker protocol: length-prefixed JSON messages over a Unix socket.

A socket, not stdin/stdout: a worker may run under compute-sanitizer, whose reports go to
the worker's stdout, and those must not mix with our messages. Every message is a dict with
a ``type``; the TypedDicts below are the whole vocabulary, and the worker's exit codes say
why it ended.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any, Literal, TypedDict

_HEADER = struct.Struct("!I")

# Worker exit codes.
EXIT_DONE = 0            # the hub said "exit"
EXIT_HARNESS = 3         # fuzzrunner itself (or the target's set-up) failed: not a finding
EXIT_CONTEXT_LOST = 4    # a case broke the CUDA context: the worker retires after reporting it
EXIT_ORPHANED = 5        # the hub went away: nobody is left to report to


# hub -> worker
class RunMsg(TypedDict):
    type: Literal["run"]
    case: dict
    oracles: list[str] | None


class ExitMsg(TypedDict):
    type: Literal["exit"]


# worker -> hub
class ReadyMsg(TypedDict):
    type: Literal["ready"]
    pid: int
    device: str


class OpMsg(TypedDict):
    type: Literal["op"]
    index: int
    op: str


class LaunchMsg(TypedDict):
    type: Literal["launch"]
    kernel: str
    where: str            # the Python call site of the launch (file:line), for crash findings


class PartialMsg(TypedDict):
    type: Literal["partial"]
    violations: list[dict]


class ResultMsg(TypedDict):
    type: Literal["result"]
    violations: list[dict]
    seconds: float
    case_no: int
    fatal: bool           # the CUDA context is gone: the worker retires


class InvalidMsg(TypedDict):
    type: Literal["invalid"]
    message: str


class HarnessMsg(TypedDict):
    type: Literal["harness"]
    message: str
    traceback: str


def send(sock: socket.socket, msg: Any) -> None:
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
    msg = json.loads(_recv_exact(sock, n))
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ValueError(f"malformed message: {str(msg)[:200]}")
    return msg


def accept(server: socket.socket, proc, deadline: float) -> socket.socket | None:
    """The first connection to ``server`` from the starting process ``proc`` (a blocking socket);
    None once ``proc`` has exited or ``deadline`` (monotonic) has passed."""
    server.settimeout(1.0)
    while True:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            if proc.poll() is not None or time.monotonic() >= deadline:
                return None
            continue
        conn.settimeout(None)
        return conn
