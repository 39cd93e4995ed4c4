"""The GPU acceptance run's tools: commands, campaigns and their checks, the carried trees (acceptance_steps.py
uses them). A campaign runs as a user runs it (``python -m fuzzrunner fuzz ...``) and is checked for its exit
code, its findings and its budget: the command's wall time, imports to exit, must stay within ``BUDGET_SLACK``
of ``--budget`` (issue 46, item 3). Standard library only, apart from what the commands themselves import.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(os.environ.get("ACCEPTANCE_WORK", "/tmp/fuzzrunner-acceptance"))  # trees, corpora, Triton's cache
REPORTS = Path(os.environ.get("ACCEPTANCE_REPORTS", str(WORK / "reports")))    # reports, tarred into $OUT
PY = sys.executable
BUDGET_SLACK = 0.10
VLLM_ARCHIVE = ROOT / ".gpu-vllm" / "0.33.0.tar.xz"
SGLANG_ARCHIVE = ROOT / ".gpu-sglang" / "sglang.tar.xz"
SGLANG_VERSION = "0.5.23"
RAY_ARCHIVE = ROOT / ".raysite" / "ray312.tar.xz"
V1_PATCH = ROOT / "docs" / "findings" / "v1_specialize_active_lora.patch"
V1_REPRO = ROOT / "docs" / "findings" / "repro_v1_specialize_active_lora.py"
REF_FAULTS = ("dummy_run_skips_mapping", "padding_not_mapped", "stale_after_all_no_lora", "graph_freezes_active_loras",
              "mapping_cache_ignores_slot_changes")
REF_SEEDS = (1, 2, 3)


class Verdict(Exception):
    """Raised by a step to end with this verdict at once."""

    def __init__(self, verdict: str, why: str):
        super().__init__(why)
        self.verdict, self.why = verdict, why


def say(text: str) -> None:
    print(text, flush=True)


def sh(argv: list, *, env: dict | None = None, timeout: float | None = None, quiet: bool = False) -> tuple[int, str]:
    """Run a command from the repository root; its output is echoed (unless ``quiet``) and returned."""
    say(f"$ {' '.join(map(str, argv))}")
    try:
        p = subprocess.run([str(a) for a in argv], cwd=ROOT, env=env or base_env(), capture_output=True, text=True,
                           timeout=timeout)
        rc, text = p.returncode, (p.stdout or "") + (p.stderr or "")
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, text = 124, out + f"\n(timed out after {timeout:.0f} s)"
    except OSError as e:  # not installed here (nvidia-smi on a machine without a driver)
        rc, text = 127, str(e)
    if not quiet:
        say(text.rstrip())
    say(f"-> exit {rc}")
    return rc, text


def base_env(**extra: str) -> dict:
    """The machine's environment for a GPU command: compiled Triton, this checkout, a shared Triton cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "FUZZRUNNER_DEVICE",
                                                             "FUZZRUNNER_VLLM_PATCH", "FUZZRUNNER_SHADOW")}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1",
               TRITON_CACHE_DIR=os.environ.get("TRITON_CACHE_DIR", str(WORK / "triton")))
    env.update(extra)
    return env


# -- campaigns ---------------------------------------------------------------------------------

@dataclass
class Run:
    """One ``fuzzrunner fuzz`` command and what its report says."""
    label: str
    budget: float
    exit: int = -1
    wall: float = 0.0
    report: dict = field(default_factory=dict)
    output: str = ""

    @property
    def findings(self) -> list:
        return self.report.get("findings", [])

    @property
    def examples(self) -> int:
        return int(self.report.get("examples", 0))

    @property
    def stop(self) -> str:
        return str(self.report.get("stop_reason", ""))

    @property
    def kept_budget(self) -> bool:
        return self.wall <= self.budget * (1 + BUDGET_SLACK)

    def kinds(self) -> list[str]:
        return sorted({f["signature"]["kind"] for f in self.findings})

    def line(self) -> str:
        over = 100 * (self.wall / self.budget - 1)
        return (f"{self.label}: exit {self.exit}, {self.examples} cases, {len(self.findings)} finding(s) "
                f"{self.kinds() or ''}, stop {self.stop or '?'}, wall {self.wall:.1f} s of a {self.budget:g} s budget "
                f"({over:+.0f}%)")


def fuzz(label: str, target: str, *args: str, budget: float, env: dict | None = None) -> Run:
    """``fuzzrunner fuzz --target TARGET --device cuda --budget B ARGS`` with its report under REPORTS."""
    REPORTS.mkdir(parents=True, exist_ok=True)
    report = REPORTS / f"{label}.json"
    corpus = WORK / "corpora" / label
    shutil.rmtree(corpus, ignore_errors=True)
    device = [] if "--device" in args or "--sanitizer" in args else ["--device", "cuda"]
    argv = [PY, "-m", "fuzzrunner", "fuzz", "--target", target, *device, "--budget", f"{budget:g}", "--corpus",
            corpus, "--report", report, "-q", *args]
    run = Run(label, budget)
    t0 = time.monotonic()
    run.exit, run.output = sh(argv, env=env, timeout=budget * 2 + 120, quiet=True)
    run.wall = time.monotonic() - t0
    try:
        data = json.loads(report.read_text())
        run.report = data["runs"][0] if "runs" in data else data
    except (OSError, ValueError, KeyError, IndexError):
        pass
    say("\n".join(ln for ln in run.output.splitlines() if "cases/s" not in ln)[-6000:])
    say(f"== {run.line()}")
    return run


def at_once(jobs: list[Callable[[], Run]]) -> list[Run]:
    """Run campaigns concurrently (threads wait on their processes)."""
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        return list(pool.map(lambda job: job(), jobs))


def report_checks(label: str, jobs: list[tuple[str, Callable[[], tuple[bool, str, float]]]], *,
                  workers: int | None = None, deadline_s: float | None = None, width: int = 56) -> int:
    """The scripts/gpu checks' shape: run ``jobs`` (name, a call giving (as expected, what it saw, its seconds)) at
    once, print ``RUN name OK|UNEXPECTED wall what`` for each in order (a job past ``deadline_s`` from the start, or
    broken, reads UNEXPECTED with why), then ``LABEL: PASS|FAIL (n/m runs as expected, s)``; 0 when all were."""
    t0 = time.monotonic()
    results = []
    with ThreadPoolExecutor(workers or max(1, len(jobs))) as pool:
        futures = [(name, pool.submit(job)) for name, job in jobs]
        for name, f in futures:
            left = None if deadline_s is None else max(1.0, deadline_s - (time.monotonic() - t0))
            try:
                ok, what, wall = f.result(timeout=left)
            except Exception as x:  # noqa: BLE001 - a run past the deadline or broken: its line says so
                ok, what, wall = False, f"no result ({type(x).__name__}: {str(x)[:150]})", time.monotonic() - t0
            results.append(ok)
            print(f"RUN {name:<{width}} {'OK' if ok else 'UNEXPECTED'} {wall:5.1f}s  {what}", flush=True)
    verdict = "PASS" if all(results) else "FAIL"
    print(f"{label}: {verdict} ({sum(results)}/{len(results)} runs as expected, {time.monotonic() - t0:.0f} s)")
    return 0 if all(results) else 1


def check(runs: list[Run], expect: Callable[[Run], str]) -> tuple[str, str]:
    """PASS when ``expect`` finds nothing wrong with any run and every run kept its budget."""
    wrong = [f"{r.label}: {why}" for r in runs for why in [expect(r)] if why]
    wrong += [f"{r.label}: wall {r.wall:.1f} s past {r.budget:g} s + {100 * BUDGET_SLACK:.0f}%" for r in runs
              if not r.kept_budget]
    worst = max((r.wall / r.budget - 1 for r in runs), default=0.0)
    summary = f"{len(runs)} campaign(s), worst wall {100 * worst:+.0f}% of budget"
    if wrong:
        return "FAIL", "; ".join(wrong)[:900] + f"; {summary}"
    return "PASS", summary


def clean(r: Run) -> str:
    return "" if r.exit == 0 and not r.findings else f"expected exit 0 and no finding, got {r.line()}"


def found(r: Run) -> str:
    return "" if r.exit == 1 and r.findings else f"expected exit 1 with a finding, got {r.line()}"


# -- trees carried as archives ---------------------------------------------------------------------

def unpack(archive: Path, dest: Path) -> Path:
    if not archive.is_file():
        raise Verdict("SKIP", f"{archive.relative_to(ROOT)} is not here: carry it (docs/ci.md)")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(archive) as t:
        t.extractall(dest, filter="tar") if sys.version_info >= (3, 12) else t.extractall(dest)
    return dest


def vllm_site() -> Path:
    sites = [p for p in (WORK / "vllm").glob("*/") if (p / "vllm").is_dir()]
    if not sites:
        raise Verdict("SKIP", "no vLLM tree unpacked (the vllm-tree step)")
    return sites[0]


def sglang_site(version: str = SGLANG_VERSION) -> Path:
    site = WORK / "sglang" / "sglang" / version
    if not (site / "sglang").is_dir():
        raise Verdict("SKIP", f"no SGLang {version} tree unpacked (the sglang-tree step)")
    deps = site / "deps"
    if not deps.exists():
        deps.symlink_to(WORK / "sglang" / "sglang" / "deps")
    return site


def pytest_counts(text: str) -> dict:
    """pytest's last summary line as {"passed": n, "failed": n, ...}."""
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed|error|skipped)", ln)]
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)",
                                             lines[-1] if lines else "")}
