"""The engine's process messages: length-prefixed JSON over Unix sockets, one declared vocabulary
per channel.

A socket, not stdin/stdout: a worker may run under compute-sanitizer, whose reports go to the
worker's stdout, and those must not mix with our messages. Each message is a frozen dataclass
with a ``kind`` (its ``type`` on the wire); ``recv`` takes the channel's vocabulary and refuses
any other message, so a message a side does not know is a broken peer, never a silent no-op.
The channels:

* hub -> worker: ``Run``, ``Exit``; worker -> hub: ``Ready``, ``Op``, ``Launch``, ``Partial``,
  ``Waiting``, ``Late``, ``Result``, ``Invalid``, ``TargetFailed``, ``Harness`` (``TO_WORKER``, ``FROM_WORKER``);
* hub -> zygote: ``Fork``, ``Exit``; zygote -> hub: ``ZygoteReady``, ``Forked``, ``Exited``,
  ``Harness`` (``TO_ZYGOTE``, ``FROM_ZYGOTE``).

A worker's (or zygote's) start-up environment is one type too: ``WorkerEnv``. Exit codes say why
a worker ended.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from ..context import Context

_HEADER = struct.Struct("!I")
PARENT_ENV = "FUZZRUNNER_PARENT_PID"   # the pid whose death ends a process of ours (lifeline.py)

# Worker exit codes.
EXIT_DONE = 0            # the hub said "exit"
EXIT_HARNESS = 3         # fuzzrunner itself (or the target's set-up) failed: not a finding
EXIT_CONTEXT_LOST = 4    # a case broke the CUDA context: the worker retires after reporting it
EXIT_ORPHANED = 5        # the hub went away: nobody is left to report to


@dataclass(frozen=True)
class Message:
    kind: ClassVar[str] = ""

    def to_dict(self) -> dict:
        return {"type": self.kind, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> Message:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


# -- hub <-> worker ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run(Message):
    kind: ClassVar[str] = "run"
    case: dict
    oracles: list | None = None
    stop_early: bool = False      # end the case after its first op with a violation (a pre-check)
    linger_s: float = 0.0         # then wait up to this long for the threads the case started (case_threads.py)


@dataclass(frozen=True)
class Exit(Message):
    kind: ClassVar[str] = "exit"


@dataclass(frozen=True)
class Ready(Message):
    kind: ClassVar[str] = "ready"
    pid: int
    device: str
    code: dict = field(default_factory=dict)  # the loaded target's code under test (Target.code_under_test)


@dataclass(frozen=True)
class Op(Message):
    kind: ClassVar[str] = "op"
    index: int
    op: str


@dataclass(frozen=True)
class Launch(Message):
    kind: ClassVar[str] = "launch"
    kernel: str
    where: str = ""               # the Python call site of the launch (file:line), for crash findings


@dataclass(frozen=True)
class Partial(Message):
    kind: ClassVar[str] = "partial"
    violations: list              # Violation dicts found so far (a crash later keeps them)


@dataclass(frozen=True)
class Waiting(Message):
    kind: ClassVar[str] = "waiting"
    threads: list                 # the case's ops are done; the worker waits for these threads of it (linger_s)


@dataclass(frozen=True)
class Late(Message):
    kind: ClassVar[str] = "late"
    case_no: int                  # a thread of this case (the worker's count) raised after the case returned:
    violations: list              # its crash (Violation dicts); sent when it happens, read during a later case


@dataclass(frozen=True)
class Result(Message):
    kind: ClassVar[str] = "result"
    violations: list
    seconds: float
    case_no: int
    fatal: bool = False           # the CUDA context is gone: the worker retires
    lingering: list = field(default_factory=list)  # [case_no, [thread names]] of cases whose threads still run
    stages: dict = field(default_factory=dict)  # the case's seconds in the worker, per stage (stages.py)


@dataclass(frozen=True)
class Invalid(Message):
    kind: ClassVar[str] = "invalid"
    message: str
    unsupported: bool = False     # an ``UnsupportedCase``: the release under test cannot run it (kept, not malformed)


@dataclass(frozen=True)
class TargetFailed(Message):
    """The target broke its contract (``errors.TargetError``: its ``run`` is ``async``, returned a
    generator, misused ``ctx.op``): the campaign stops with this line; no finding, no worker crash."""
    kind: ClassVar[str] = "target-failed"
    message: str


@dataclass(frozen=True)
class Harness(Message):
    kind: ClassVar[str] = "harness"
    message: str
    traceback: str = ""


# -- hub <-> zygote ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fork(Message):
    kind: ClassVar[str] = "fork"
    socket: str                   # the child becomes a worker talking to this socket,
    log: str                      # its output going to this log


@dataclass(frozen=True)
class ZygoteReady(Message):
    kind: ClassVar[str] = "ready"
    pid: int


@dataclass(frozen=True)
class Forked(Message):
    kind: ClassVar[str] = "forked"
    pid: int


@dataclass(frozen=True)
class Exited(Message):
    kind: ClassVar[str] = "exited"
    pid: int
    returncode: int               # negative: the signal, as subprocess reports it


def _vocabulary(*classes: type[Message]) -> dict[str, type[Message]]:
    return {c.kind: c for c in classes}


TO_WORKER = _vocabulary(Run, Exit)
FROM_WORKER = _vocabulary(Ready, Op, Launch, Partial, Waiting, Late, Result, Invalid, TargetFailed, Harness)
TO_ZYGOTE = _vocabulary(Fork, Exit)
FROM_ZYGOTE = _vocabulary(ZygoteReady, Forked, Exited, Harness)


# -- the start-up environment -----------------------------------------------------------------------

@dataclass(frozen=True)
class WorkerEnv:
    """What a worker (or the zygote that forks it) learns from its environment at start-up: the target to
    load, the run's ``Context`` (the one place it is serialized for a child process), where to report."""
    target: str                               # FUZZRUNNER_TARGET: the target spec to load
    context: Context = field(default_factory=lambda: Context.of("cpu"))
    hub_socket: str = ""                      # FUZZRUNNER_HUB_SOCKET: where the hub listens
    parent: int | None = None                 # the process whose death ends this one (lifeline)
    zygote_socket: str = ""                   # FUZZRUNNER_ZYGOTE_SOCKET: a zygote's control socket
    extra: dict = field(default_factory=dict)  # CUDA_LAUNCH_BLOCKING, the sanitizer's variables, ...

    _NAMES: ClassVar[dict[str, str]] = {"target": "FUZZRUNNER_TARGET", "hub_socket": "FUZZRUNNER_HUB_SOCKET",
                                        "zygote_socket": "FUZZRUNNER_ZYGOTE_SOCKET"}
    # the context: its device, the shadow oracle's mode, compute-sanitizer's tool ("none": unset), the GPU
    _CONTEXT: ClassVar[dict[str, str]] = {"device": "FUZZRUNNER_DEVICE", "shadow": "FUZZRUNNER_SHADOW",
                                          "sanitizer": "FUZZRUNNER_SANITIZER", "gpu": "FUZZRUNNER_GPU"}

    def environ(self, base: dict) -> dict:
        """``base`` (this process's environment) with this start-up's variables set, and those of its
        fields that are empty removed (nothing inherited from ``base`` stands in for them). The context's
        Triton mode is ``TRITON_INTERPRET`` (compiled on a GPU even from a process that interprets: a
        ``--device cpu`` parent, an export); its GPU is ``CUDA_VISIBLE_DEVICES`` (none on the CPU)."""
        env = dict(base, **self.extra)
        c = self.context
        values = {**{name: getattr(self, name) for name in self._NAMES},
                  **{name: getattr(c, name) for name in self._CONTEXT}}
        for name, var in {**self._NAMES, **self._CONTEXT}.items():
            value = values[name]
            if value and value != "none":
                env[var] = str(value)
            else:
                env.pop(var, None)
        if c.interpreted:
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        if c.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif c.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = c.gpu
        if self.parent is not None:
            env[PARENT_ENV] = str(self.parent)
        return env

    @classmethod
    def zygote_control(cls, path: str) -> dict:
        """What makes a worker's environment a zygote's: its control socket."""
        return {cls._NAMES["zygote_socket"]: path}

    @classmethod
    def read(cls, environ=os.environ) -> WorkerEnv:
        parent = environ.get(PARENT_ENV, "")
        values = {name: environ.get(var, "") for name, var in cls._NAMES.items()}
        c = {name: environ.get(var, "") for name, var in cls._CONTEXT.items()}
        device = c["device"] or "cpu"
        context = Context.of(device, interpreted=environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
                             shadow=c["shadow"] or None, sanitizer=c["sanitizer"] or "none", gpu=c["gpu"] or None)
        return cls(**values, context=context, parent=int(parent) if parent.isdigit() else None)


# -- the wire ---------------------------------------------------------------------------------------

def send(sock: socket.socket, msg: Message) -> None:
    data = json.dumps(msg.to_dict()).encode()
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def recv(sock: socket.socket, vocabulary: dict[str, type[Message]]) -> Any:
    """The next message, as its type in ``vocabulary``; ``ValueError`` for anything else (malformed,
    or a message this channel does not carry)."""
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    msg = json.loads(_recv_exact(sock, n))
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ValueError(f"malformed message: {str(msg)[:200]}")
    cls = vocabulary.get(msg["type"])
    if cls is None:
        raise ValueError(f"unexpected message {msg['type']!r} (this channel carries {', '.join(vocabulary)})")
    try:
        return cls.from_dict(msg)
    except TypeError as e:  # a field missing
        raise ValueError(f"malformed {msg['type']!r} message: {e}") from None


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
