"""GPU checks of the run's context (issue 45, item 1), each a line ok/FAILED; exit 1 if any failed.

Run on a GPU machine from a checkout: ``PYTHONPATH=. python3 scripts/gpu/run_context.py`` (a few minutes).
What a CPU machine cannot show: the context resolved on a GPU, the device mode chosen there and given the
GPU's memory, a ``--device cpu`` campaign on a GPU machine reporting cpu, a worker placed on its GPU, CPU
triage of a GPU finding under its own CPU context, vllm_lora drawing bfloat16 only for cuda.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTEXT_TARGET = f"{ROOT / 'tests' / 'integration' / 'context_target.py'}:TARGET"
FAULT_CASE = dict(target="reference_runner", config={"max_loras": 1, "capture_sizes": [1]},
                  ops=[{"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}], faults=["dummy_run_skips_mapping"])
failed: list[str] = []


def check(name: str, ok: bool, detail: object = "") -> None:
    print(f"{'ok    ' if ok else 'FAILED'} {name}" + (f": {detail}" if detail and not ok else ""), flush=True)
    if not ok:
        failed.append(name)


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main() -> int:
    os.environ.pop("FUZZRUNNER_SHADOW", None)
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["FUZZRUNNER_DEVICE"] = "cuda"
    import torch

    import fuzzrunner
    from fuzzrunner import Case, env_defaults, replay
    from fuzzrunner.context import Context
    from fuzzrunner.gpus import visible_gpus
    from fuzzrunner.report import report_dict
    from fuzzrunner.settings import Settings
    if not torch.cuda.is_available():
        print("run_context: no CUDA device here", file=sys.stderr)
        return 2
    gpu = Context("cuda", False, "device")
    check("Settings() resolves to cuda, compiled, the device mode", Context.resolve(Settings()) == gpu,
          Context.resolve(Settings()))
    os.environ["FUZZRUNNER_SHADOW"] = "cpu"
    check("FUZZRUNNER_SHADOW=cpu is the front ends' default", Context.resolve(env_defaults.apply(Settings())) ==
          Context("cuda", False, "cpu"))
    os.environ.pop("FUZZRUNNER_SHADOW")
    case = Case(**FAULT_CASE)
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "log.jsonl"
        os.environ["CONTEXT_LOG"] = str(log)
        r = fuzzrunner.fuzz(CONTEXT_TARGET, settings=Settings(device="cpu", max_examples=10, seed=1, shrink=False,
                                                             min_valid=0), corpus=Path(d) / "c1")
        entries = _log(log)
        check("a --device cpu campaign on a GPU machine runs and reports cpu",
              r.context == Context("cpu", True, "cpu") and report_dict(r)["provenance"]["device"] == "cpu"
              and {e["device"] for e in entries} == {"cpu"} and {e.get("visible") for e in entries
                                                                   if e["where"] == "run"} == {""},
              (r.context, entries[:3]))
        log.unlink(missing_ok=True)
        r = fuzzrunner.fuzz(CONTEXT_TARGET, settings=Settings(device="cuda", max_examples=10, seed=1, shrink=False,
                                                             min_valid=0, cpu_triage=False), corpus=Path(d) / "c2")
        runs = [e for e in _log(log) if e["where"] == "run"]
        first = (visible_gpus() or [None])[0]
        check("a cuda campaign's strategy and workers get the cuda context, the worker on its GPU",
              r.context == gpu and {e["device"] for e in _log(log) if e["where"] == "strategy"} == {"cuda"}
              and runs and all(e["context_shadow"] == "device" and e["context_interpreted"] is False
                               and e["context_gpu"] == first and (first is None or e["visible"] == first)
                               for e in runs), runs[:3])
        check("its findings record the context they were found under", r.findings and
              all(f.context == gpu for f in r.findings), [f.context for f in r.findings])
        r = fuzzrunner.fuzz("reference_runner", faults=["dummy_run_skips_mapping"], corpus=Path(d) / "c3",
                            settings=Settings(device="cuda", max_examples=20, seed=1, oracles=("shadow",)))
        triaged = [f.triage for f in r.findings]
        check("a device-mode finding is triaged on the CPU under its own context", r.findings and all(
            f.context == gpu for f in r.findings) and any(t and t.get("status") == "reproduced" for t in triaged),
            triaged)
    found = replay(case, device="cuda", oracles=["shadow"])
    check("replay(device='cuda') in this process runs the device mode on the GPU",
          any(v.kind == "uninitialized-read" and v.tool == "shadow" for v in found), found)
    os.environ["FUZZRUNNER_SHADOW"] = "device"
    found = replay(case, device="cpu", oracles=["shadow"], isolated=True)
    os.environ.pop("FUZZRUNNER_SHADOW")
    check("replay(device='cpu', isolated) with the device mode checks the CPU's memory in its worker",
          any(v.kind == "uninitialized-read" for v in found), found)
    try:
        from fuzzrunner.target import load_target
        vllm = load_target("vllm_lora")
    except Exception as e:  # noqa: BLE001 - vLLM is optional here
        print(f"skip   vllm_lora's dtypes: {type(e).__name__}: {e}")
    else:
        from hypothesis import HealthCheck, given, settings
        for device, want in (("cpu", {"float16"}), ("cuda", {"float16", "bfloat16"})):
            seen: set = set()

            @settings(max_examples=60, database=None, derandomize=True, deadline=None,
                      suppress_health_check=list(HealthCheck))
            @given(vllm.strategy((), 2, device=device))
            def draw(c):
                seen.add(c.config["dtype"])  # noqa: B023 - run at once, in this iteration
            draw()
            check(f"vllm_lora draws {sorted(want)} for {device}", seen == want, seen)
    print(f"run_context: {'all ok' if not failed else f'{len(failed)} FAILED: ' + '; '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
