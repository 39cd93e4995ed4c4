"""Probe: hand-over to a warm spare after a crash, with stacks dumped if it stalls (GPU host debugging)."""
import faulthandler
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzzrunner.case import Case  # noqa: E402
from fuzzrunner.context import Context
from fuzzrunner.engine import Hub, WorkerSpec  # noqa: E402

faulthandler.dump_traceback_later(45, exit=True)
T = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                 "benchmarks", "crash_target.py") + ":TARGET"
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
c = lambda op: Case("crash_bench", {"work_ms": 0}, ({"op": op},))  # noqa: E731
with Hub(WorkerSpec(T, Context.of(device), log_path="/tmp/probe_worker.log"), timeout_s=30, standby=True) as h:
    t = time.perf_counter()
    h.run(c("work"))
    print(f"first case {time.perf_counter() - t:.2f}s", flush=True)
    for i in range(4):
        t = time.perf_counter()
        r = h.run(c("crash"))
        t1 = time.perf_counter()
        print(f"crash {i}: crashed={r.crashed} {t1 - t:.2f}s; spares {len(h._spares)}", flush=True)
        h.run(c("work"))
        print(f"  next case {time.perf_counter() - t1:.2f}s", flush=True)
print("done")
