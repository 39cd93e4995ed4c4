"""The worker: holds the device, runs case after case under the oracles, reports back.

Started by the hub as ``python -m fuzzrunner.engine.worker`` (possibly under
compute-sanitizer) with ``FUZZRUNNER_HUB_SOCKET``, ``FUZZRUNNER_TARGET`` and
``FUZZRUNNER_DEVICE`` in its environment. It imports nothing from the hub. Before and
after each case it prints a marker line on stdout (flushed, after a device
synchronize) so that sanitizer reports can be attributed to the case that caused them.
"""

from __future__ import annotations

import os
import socket
from contextlib import ExitStack
import sys
import time


def _marker(kind: str, case_no: int) -> None:
    sys.stdout.write(f"@@fuzzrunner-{kind} {case_no}@@\n")
    sys.stdout.flush()


class _TensorAnnouncer:
    """Under compute-sanitizer: print each tracked buffer's address range, so that a report's
    address can be named (``@@fuzzrunner-tensor NAME 0xADDR NBYTES@@``, inside the case markers)."""

    def on_track(self, tensor, name, per_step, initialized) -> None:
        st = tensor.untyped_storage()
        sys.stdout.write(f"@@fuzzrunner-tensor {name} {hex(st.data_ptr())} {st.nbytes()}@@\n")
        sys.stdout.flush()

    def on_carry_over(self, *a) -> None:
        pass

    def on_lora_launch(self, *a) -> None:
        pass


class _LaunchReporter:
    """A tracking watcher that tells the hub which kernel is about to run (crash attribution)."""

    def __init__(self, sock):
        self.sock = sock
        self.last = ""

    def on_track(self, *a) -> None:
        pass

    def on_carry_over(self, *a) -> None:
        pass

    def on_lora_launch(self, kernel: str, meta: dict) -> None:
        from .protocol import send
        self.last = kernel
        send(self.sock, {"type": "launch", "kernel": kernel})


def _context_lost(last_kernel: str):
    """None if the CUDA context still works; else the crash violation for the case that broke it.

    An illegal address leaves the context unusable (../shared/CONTEXT.md): the case becomes
    a crash finding and the worker retires so that a fresh process takes the next case.
    """
    import torch
    from ..violation import Violation
    try:
        torch.cuda.synchronize()
        return None
    except Exception as e:  # torch.AcceleratorError / RuntimeError, depending on the version
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        what = text.split("CUDA error:", 1)[-1].strip()
        return Violation("cuda", "crash", last_kernel, what, "",
                         f"the CUDA context was lost ({text}); last LoRA launch: {last_kernel or 'none'}",
                         {"error": text})


def main() -> int:
    from .. import _env, tracking
    _env.configure()  # FUZZRUNNER_DEVICE comes from the hub; TRITON_INTERPRET before Triton loads
    from ..case import Case
    from ..errors import InvalidCase
    from ..execute import run_case
    from ..target import load_target
    from .protocol import recv, send

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["FUZZRUNNER_HUB_SOCKET"])
    try:
        target = load_target(os.environ["FUZZRUNNER_TARGET"])
        device = os.environ.get("FUZZRUNNER_DEVICE", "cpu")
        if device == "cuda":
            import torch
            torch.cuda.init()
    except Exception as e:  # the harness broke: not a finding
        send(sock, {"type": "harness", "message": f"worker set-up failed: {type(e).__name__}: {e}"})
        return 3
    send(sock, {"type": "ready", "pid": os.getpid(), "device": device})
    reporter = _LaunchReporter(sock)
    watchers = [reporter] + ([_TensorAnnouncer()] if os.environ.get("FUZZRUNNER_SANITIZER") else [])
    case_no = 0
    while True:
        msg = recv(sock)
        if msg.get("type") == "exit":
            return 0
        case_no += 1
        t0 = time.perf_counter()
        reporter.last = ""
        _marker("case-begin", case_no)
        try:
            case = Case.from_dict(msg["case"])
            with ExitStack() as stack:
                for w in watchers:
                    stack.enter_context(tracking.watch(w))
                outcome = run_case(case, target, oracles=msg.get("oracles"), device=device,
                                   on_op=lambda i, op: send(sock, {"type": "op", "index": i, "op": op.get("op")}),
                                   on_partial=lambda vs: send(sock, {"type": "partial",
                                                                     "violations": [v.to_dict() for v in vs]}))
            lost = _context_lost(reporter.last) if device == "cuda" else None
        except InvalidCase as e:
            _marker("case-end", case_no)
            send(sock, {"type": "invalid", "message": str(e)})
            continue
        except Exception as e:  # a bug in fuzzrunner itself, not in the target: the harness broke
            import traceback
            send(sock, {"type": "harness", "message": f"{type(e).__name__}: {e}",
                        "traceback": traceback.format_exc()[-4000:]})
            return 3
        _marker("case-end", case_no)
        violations = outcome.violations + ([lost] if lost else [])
        send(sock, {"type": "result", "violations": [v.to_dict() for v in violations],
                    "seconds": time.perf_counter() - t0, "case_no": case_no, "fatal": lost is not None})
        if lost is not None:
            return 4


if __name__ == "__main__":
    sys.exit(main())
