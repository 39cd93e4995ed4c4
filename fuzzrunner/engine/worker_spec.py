"""What a worker process is started with: its spec, its environment, and the folder of its socket and log.

A worker's folder is named after the hub's process (``fzr-hub-<pid>-<random>``), so the next hub on the
machine removes the folders of hubs that were killed with ``kill -9`` (``sweep_stale_dirs``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

from ..context import Context
from . import protocol
from .lifeline import alive

STARTUP_TIMEOUT_S = 300.0  # torch import, CUDA init, sanitizer start-up

DIR_PREFIX = "fzr-hub-"
SOCKET_PATH_MAX = 100  # AF_UNIX socket paths are limited to 107 bytes on Linux


@dataclass
class WorkerSpec:
    target: str
    context: Context = field(default_factory=lambda: Context.of("cpu"))  # the worker's: device, GPU, modes
    wrapper: list = field(default_factory=list)  # e.g. compute-sanitizer argv prefix
    env: dict = field(default_factory=dict)
    log_path: str | None = None             # keep the worker's stdout+stderr here (else a temp file, deleted)
    max_rss_mb: float | None = None         # recycle a worker past this resident size (else: rss.py's default)
    code: dict = field(default_factory=dict)  # the code under test the campaign loaded: a worker must load the same

    @property
    def device(self) -> str:
        return self.context.device

    @property
    def sanitizer(self) -> str | None:
        return self.context.sanitizer if self.context.sanitizer != "none" else None


def worker_environment(spec: WorkerSpec, socket_path: str) -> dict:
    """A worker's (or its zygote's) environment: ours, the spec's, and its start-up (``WorkerEnv``)."""
    start = protocol.WorkerEnv(spec.target, spec.context, hub_socket=socket_path, parent=os.getpid(),
                               extra={**spec.env, "PYTHONUNBUFFERED": "1"})
    env = start.environ(dict(os.environ))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    # torch.compile's compile workers would be processes a case started, ended after it (processes.py): compile
    # in the worker itself, unless the user says otherwise
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


def hub_dir() -> str:
    """A fresh temp dir for a worker's socket and log, named after this process; under /tmp if
    ``TMPDIR`` is so deep that the socket path would be too long for AF_UNIX."""
    d = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")
    if len(os.fsencode(os.path.join(d, "s"))) > SOCKET_PATH_MAX:  # bytes: TMPDIR may not be UTF-8
        shutil.rmtree(d, ignore_errors=True)
        d = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir="/tmp")
    return d


def sweep_stale_dirs() -> None:
    """Remove the temp dirs of hubs whose process is gone (a ``kill -9`` gives no chance to clean
    up; the next hub on the machine does it). A dir is named ``fzr-hub-<pid>-<random>``."""
    for root in {tempfile.gettempdir(), "/tmp"}:
        try:
            names = [n for n in os.listdir(root) if n.startswith(DIR_PREFIX)]
        except OSError:
            continue
        for name in names:
            pid = name[len(DIR_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
