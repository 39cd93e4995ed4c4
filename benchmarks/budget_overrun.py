"""Does a campaign stop within its ``--budget``? Budget against wall time, and where the rest went.

    PYTHONPATH=. python benchmarks/budget_overrun.py [--rows ROW,ROW] [--budget 30] [--device cpu] [--seed 1]

Each row runs ``fuzzrunner fuzz --budget B --max-examples 100000`` as a user would (a fresh process, its
wall time from before the interpreter starts to its exit) and records, through a ``sitecustomize`` on the
child's ``PYTHONPATH`` that timestamps the engine's own functions in every fuzzrunner process (the shard
processes too), when each phase began and ended. Printed per row, in seconds:

  wall        the command, start to exit          over   wall - budget, and as % of the budget
  start       the process start to the first shard's search clock (imports, the target, the plan, shard
              processes and their imports)
  past        how far the last shard's search ran past the budget's end (the case in flight, a shrink step)
  close       the slowest shard's close (its workers, spares, pre-check hubs)
  join        from the last shard closed to the campaign having its result (shard processes ending, merge)
  triage      CPU triage of the findings (a GPU campaign's), and ``--triage``: the same replays timed here
              on the CPU for a CPU campaign's findings, as a GPU campaign would run them (not in ``wall``)
  end         from the campaign's result to the command's return (summary, reports, repro export)
  exit        from the command's return to the process's exit (the interpreter's shutdown)
  load        the machine's 1-minute load average as the row ended (a loaded machine stretches every phase)

Rows (``--rows``, comma-separated; default all): ``ref``, ``ref-fault`` (a planted fault: findings,
shrinking), ``ref-w2``, ``ref-fault-w2`` (two shard processes), ``vllm`` (vLLM 0.33.0 finds V1), ``vllm-fault``,
``sglang``, ``sglang-fault``. The engine targets need their trees (scripts/vllm_setup.sh, sglang_setup.sh);
a row whose target cannot load prints why.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (target, faults, workers): what each row runs
ROWS = {
    "ref": ("reference_runner", (), 1),
    "ref-fault": ("reference_runner", ("padding_not_mapped",), 1),
    "ref-w2": ("reference_runner", (), 2),
    "ref-fault-w2": ("reference_runner", ("padding_not_mapped",), 2),
    "vllm": ("vllm_lora", (), 1),
    "vllm-fault": ("vllm_lora", ("dummy_run_skips_prepare",), 1),
    "sglang": ("sglang_lora", (), 1),
    "sglang-fault": ("sglang_lora", ("graph_seg_indptr_uninitialized",), 1),
}

# Written as the child's sitecustomize: it wraps, in every fuzzrunner process, the functions that begin and
# end each phase, and appends one JSON line per call to $FUZZRUNNER_BENCH_PHASES (time.time(), the pid).
HOOK = r'''
import functools, importlib.util, json, os, sys, time
_LOG = os.environ.get("FUZZRUNNER_BENCH_PHASES")


def _mark(what, **kw):
    with open(_LOG, "a") as f:
        f.write(json.dumps({"t": time.time(), "pid": os.getpid(), "what": what, **kw}) + "\n")


def _wrap(owner, name, label):
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*a, **kw):
        _mark(label + ":in")
        try:
            return original(*a, **kw)
        finally:
            _mark(label + ":out")
    setattr(owner, name, wrapper)


def _search(m):
    init = m.Shard.__init__

    def shard_init(self, *a, **kw):
        init(self, *a, **kw)
        _mark("shard:clock", budget=self.settings.budget_s)
    m.Shard.__init__ = shard_init
    _wrap(m.Shard, "search", "search")
    _wrap(m.Shard, "close", "close")


def _cli(m):  # before cli/__init__.py takes cmd_fuzz into its COMMANDS: main dispatches the wrapped one
    _wrap(m, "cmd_fuzz", "cli")
    _wrap(m, "_write_reports", "reports")


PATCH = {"fuzzrunner.engine.search": _search, "fuzzrunner.cli.commands": _cli,
         "fuzzrunner.api": lambda m: _wrap(m, "run_campaign", "campaign"),
         "fuzzrunner.engine.campaign": lambda m: _wrap(m, "_triage", "triage"),
         "fuzzrunner.engine.shard_run": lambda m: _wrap(m, "replay_corpus", "corpus")}


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name not in PATCH:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            PATCH[name](module)
        spec.loader.exec_module = exec_module
        return spec


if _LOG:
    sys.meta_path.insert(0, _Finder())
'''


def _first(marks: list, what: str) -> float | None:
    ts = [m["t"] for m in marks if m["what"] == what]
    return min(ts) if ts else None


def _last(marks: list, what: str) -> float | None:
    ts = [m["t"] for m in marks if m["what"] == what]
    return max(ts) if ts else None


def _phases(marks: list, t0: float, t_end: float, budget: float) -> dict:
    """Seconds per phase from the marks (None where a phase did not happen)."""
    clock = _first(marks, "shard:clock")
    clocks = {m["pid"]: m["t"] for m in marks if m["what"] == "shard:clock"}
    search_out = {m["pid"]: m["t"] for m in marks if m["what"] == "search:out"}
    close_in = {m["pid"]: m["t"] for m in marks if m["what"] == "close:in"}
    close_out = {m["pid"]: m["t"] for m in marks if m["what"] == "close:out"}
    past = [search_out.get(p, close_in.get(p, clocks[p])) - (clocks[p] + budget) for p in clocks]
    closes = [close_out[p] - close_in[p] for p in close_in if p in close_out]
    campaign_out = _last(marks, "campaign:out")
    triage_in, triage_out = _first(marks, "triage:in"), _last(marks, "triage:out")
    triage = (triage_out - triage_in) if triage_in and triage_out else None
    return {
        "start": clock - t0 if clock else None,
        "past": max(past) if past else None,
        "close": max(closes) if closes else None,
        "join": campaign_out - max(close_out.values()) - (triage or 0.0) if campaign_out and close_out else None,
        "triage": triage,
        "end": (_last(marks, "cli:out") or t_end) - campaign_out if campaign_out else None,
        "exit": t_end - (_last(marks, "cli:out") or t_end),
    }


def run_row(name: str, budget: float, device: str, seed: int, triage: bool) -> dict:
    target, faults, workers = ROWS[name]
    with tempfile.TemporaryDirectory(prefix="fzr-budget-") as tmp:
        with open(os.path.join(tmp, "sitecustomize.py"), "w") as f:
            f.write(HOOK)
        log = os.path.join(tmp, "phases.jsonl")
        report = os.path.join(tmp, "r.json")
        cmd = [sys.executable, "-m", "fuzzrunner", "fuzz", "--target", target, "--device", device,
               "--budget", f"{budget:g}", "--max-examples", "100000", "--seed", str(seed), "--workers", str(workers),
               "--corpus", os.path.join(tmp, "c"), "--report", report, "-q"]
        for fault in faults:
            cmd += ["--fault", fault]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, ROOT, os.environ.get("PYTHONPATH", "")]),
                   FUZZRUNNER_BENCH_PHASES=log)
        t0 = time.time()
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        t_end = time.time()
        try:
            run = json.load(open(report))["runs"][0]
        except (OSError, ValueError, KeyError, IndexError):
            return {"row": name, "error": f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-400:]}"}
        marks = [json.loads(line) for line in open(log)] if os.path.exists(log) else []
        out = {"row": name, "target": target, "workers": workers, "budget": budget, "wall": t_end - t0,
               "load": os.getloadavg()[0],
               "exit": p.returncode, "cases": run["examples"], "findings": len(run["findings"]),
               "stop": run.get("stop_reason", ""), **_phases(marks, t0, t_end, budget)}
        if triage and run["findings"] and device == "cpu":
            out["triage"] = _triage_here(os.path.join(tmp, "c"), target, faults)
        return out


def _triage_here(corpus: str, target: str, faults: tuple) -> float:
    """Seconds the CPU triage of these findings takes (what a GPU campaign spends on them after its search)."""
    from fuzzrunner.corpus import Corpus
    from fuzzrunner.engine.triage import triage_on_cpu
    from fuzzrunner.settings import Settings
    c = Corpus(corpus, faults=faults)
    findings = [f for _, _, f in c.entries(target) if f is not None]
    t0 = time.time()
    triage_on_cpu(findings, target, Settings(case_timeout_s=120.0))
    return time.time() - t0


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    ap.add_argument("--budget", type=float, default=30.0, help="seconds, every row")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--triage", action="store_true",
                    help="also time the CPU triage of a CPU row's findings (as a GPU campaign would run it)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"unknown row(s) {', '.join(unknown)}: choose from {', '.join(ROWS)}")
    print(f"budget overrun: {args.device}, {os.cpu_count()} CPUs, seed {args.seed}; seconds; over = wall - budget")
    head = (f"{'row':14} {'budget':>6} {'wall':>6} {'over':>6} {'over%':>6} {'start':>6} {'past':>6} {'close':>6} "
            f"{'join':>6} {'triage':>6} {'end':>6} {'exit':>6} {'cases':>6} {'found':>5} {'load':>5}  stop")
    print(head, flush=True)
    results = []
    for name in rows:
        r = run_row(name, args.budget, args.device, args.seed, args.triage)
        results.append(r)
        if "error" in r:
            print(f"{name:14} failed: {r['error']}", flush=True)
            continue
        over = r["wall"] - r["budget"]
        print(f"{name:14} {r['budget']:6.0f} {r['wall']:6.1f} {over:6.1f} {100 * over / r['budget']:5.0f}% "
              f"{_fmt(r['start']):>6} {_fmt(r['past']):>6} {_fmt(r['close']):>6} {_fmt(r['join']):>6} "
              f"{_fmt(r['triage']):>6} {_fmt(r['end']):>6} {_fmt(r['exit']):>6} {r['cases']:6} {r['findings']:5} "
              f"{r['load']:5.1f}  {r['stop']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
