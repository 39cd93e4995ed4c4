"""The shadow oracle's device mode against plain compiled runs, side by side in one run (a GPU).

Rows, each timed interleaved with its plain twin in this one process:
  * kernels: one LoRA layer step (shrink + expand + bgmv launches and their torch ops, as the reference
    runner issues them) per size, plain vs under the device shadow (instrumented twins, device
    dispatch mode, one read-back per step): median ms per step and the ratio;
  * gather: a load-heavy kernel (an index load and a row load per token) with per-step buffers, at
    65536 tokens (launch-bound) and 2^20 tokens (device-bound: the instrumented kernel's own cost);
  * cases: generated reference_runner cases replayed on cuda with no oracle vs ``--oracle shadow``
    (the device mode): ms per case (median) and cases/s, the ratio; and the CPU shadow oracle
    (Triton's interpreter, FUZZRUNNER_DEVICE=cpu, in a subprocess on this host's CPUs) on the first
    ``--cpu-cases`` of the same cases: cases/s, for the GPU/CPU throughput ratio;
  * campaigns (``--campaigns W``): `fuzzrunner fuzz --target reference_runner` campaigns with W workers
    and the same budget and seed on this one host: on cuda with the default oracles, on cuda with
    ``--oracle shadow`` (the device mode), and on the CPU with ``--oracle shadow`` (the interpreter);
    cases/s of each, the workers' busy share (the report's ``worker_s``) and the kernels each compiled.
    Shadow campaigns with other seeds first fill the Triton cache (``--warm-up`` s; as a nightly
    machine's cache is, which keeps what earlier nights compiled).
Usage: PYTHONPATH=. python benchmarks/gpu_shadow.py [--reps 20] [--cases 100] [--cpu-cases 20] [--seed 7]
       [--rows small,gather] [--skip-cases] [--campaigns W[,W] --campaign-budget S --warm-up S]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cases(n: int, seed: int) -> list:
    from hypothesis import Phase, given, settings
    from hypothesis import seed as hseed

    from fuzzrunner.target import load_target
    out: list = []
    strategy = load_target("reference_runner").cases((), max_ops=8)
    hs = settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None)
    def keep(case) -> None:
        out.append(case)
    hs(hseed(seed)(given(strategy)(keep)))()
    return out[:n]


def _cpu_rate(cases: list) -> tuple[float, int]:
    """cases/s of the CPU shadow oracle on these cases, in a subprocess with Triton's interpreter."""
    code = ("import json,sys,time; from fuzzrunner import Case, replay; cs=[Case.from_json(c) for c in "
            "json.load(sys.stdin)]; t=time.perf_counter(); n=sum(1 for c in cs if replay(c, oracles=['shadow'], "
            "device='cpu') is not None); print(json.dumps([n, time.perf_counter()-t]))")
    env = {**os.environ, "FUZZRUNNER_DEVICE": "cpu", "PYTHONPATH": "."}
    env.pop("FUZZRUNNER_SHADOW", None)
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps([c.to_json() for c in cases]),
                         capture_output=True, text=True, env=env, check=True)
    n, secs = json.loads(out.stdout.strip().splitlines()[-1])
    return n / secs, n


def _step(size, torch):
    from fuzzrunner import tracking
    from fuzzrunner.kernels import KernelConfig, lora_bgmv, lora_expand, lora_shrink
    from fuzzrunner.runner.kernel_meta import LoRAKernelMeta
    M, K, R, L, N = size
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    slots = torch.randint(-1, L, (M,), generator=g, dtype=torch.int32, device=dev)
    meta = LoRAKernelMeta.make("token_meta", L, M, dev)
    a = tracking.track(torch.randn(len(N), L, R, K, generator=g, device=dev), "lora_a")
    b = tracking.track(torch.randn(len(N), L, max(N), R, generator=g, device=dev), "lora_b")
    sn = tracking.track(torch.tensor(N, dtype=torch.int32, device=dev), "slice_n")
    so = tracking.track(torch.tensor([sum(N[:i]) for i in range(len(N))], dtype=torch.int32, device=dev),
                        "slice_off")
    x = torch.randn(M, K, generator=g, device=dev)
    y = torch.zeros(M, sum(N), device=dev)
    ga, gb, z = a[0].contiguous(), b[0, :, :K].contiguous(), torch.zeros(M, K, device=dev)
    kc = KernelConfig(interpreted=False)

    def step():
        meta.prepare(slots)  # per-step metadata rewritten each step, as the runner does
        buf = torch.empty(len(N), M, R, device=dev)
        args = meta.meta_args(M)
        lora_shrink(x, a, buf, *args[:5], args[5], L + 1, 0.5, kc)
        lora_expand(buf, b, y, *args[:5], args[5], L + 1, sn, so, kc)
        lora_bgmv(x, ga, gb if gb.shape[1] == K else gb, z, meta.token_lora_mapping[:M], 0.5, kc)
    return step


def _gather(torch, T=65536, rows=4096, W=64):  # noqa: N803
    import triton
    import triton.language as tl

    from fuzzrunner import tracking

    @triton.jit
    def gather_kernel(table, idx, out, T, W: tl.constexpr, BLOCK: tl.constexpr):
        t = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        w = tl.arange(0, W)
        row = tl.load(idx + t, mask=t < T, other=0)
        x = tl.load(table + row[:, None] * W + w[None, :], mask=(t < T)[:, None])
        tl.store(out + t[:, None] * W + w[None, :], x, mask=(t < T)[:, None])

    dev = torch.device("cuda")
    table = tracking.track(torch.empty(rows, W, device=dev), "table", per_step=True, initialized=False)
    idx = tracking.track(torch.empty(T, dtype=torch.int64, device=dev), "idx", per_step=True, initialized=False)
    out = torch.empty(T, W, device=dev)
    src_t, src_i = torch.randn(rows, W, device=dev), torch.randint(0, rows, (T,), device=dev)

    def step():
        table.copy_(src_t)
        idx.copy_(src_i)
        gather_kernel[(triton.cdiv(T, 64),)](table, idx, out, T, W=W, BLOCK=64)
    return step


def _time_step(make, shadow: bool, reps: int, torch) -> list[float]:
    from fuzzrunner.oracles.shadow.gpu.oracle import GpuShadowOracle
    oracle = GpuShadowOracle("cuda") if shadow else None
    if oracle:
        oracle.start()
        oracle.begin_op(0, {"op": "setup"})
    out = []
    try:
        step = make()
        for i in range(reps + 2):
            if oracle:
                oracle.begin_op(i + 1, {"op": "step"})
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            if oracle:
                oracle.end_op()  # the op's read-back (a synchronisation)
            torch.cuda.synchronize()
            if i >= 2:  # the first two compile
                out.append(time.perf_counter() - t0)
    finally:
        if oracle:
            vs = oracle.finish()
            assert not [v for v in vs if v.kind != "tool-limitation"], vs
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="The shadow oracle's device mode against plain compiled runs, side by "
                                 "side in one run. Needs a CUDA GPU (rows: see this file's docstring).",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--reps", type=int, default=20, help="timed steps per kernel row and mode (x3, interleaved)")
    ap.add_argument("--cases", type=int, default=100, help="generated reference_runner cases replayed per mode")
    ap.add_argument("--cpu-cases", type=int, default=20, help="of those, replayed under the CPU shadow oracle")
    ap.add_argument("--seed", type=int, default=7, help="seed of the generated cases and campaigns")
    ap.add_argument("--rows", default="", help="comma-separated kernel row name prefixes ('' = all; 'none' = none)")
    ap.add_argument("--skip-cases", action="store_true", help="no case rows")
    ap.add_argument("--campaigns", default="", metavar="W[,W]",
                    help="also run campaigns with W workers (comma-separated: each count; '': none)")
    ap.add_argument("--warm-up", type=int, default=60, metavar="S",
                    help="before the campaigns, shadow campaigns on cuda for up to S s fill Triton's cache")
    ap.add_argument("--campaign-budget", type=int, default=60, help="seconds per campaign")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also profile the host side of N shadow replays (cProfile, top functions)")
    args = ap.parse_args()
    os.environ.setdefault("FUZZRUNNER_DEVICE", "cuda")
    from fuzzrunner import _env
    _env.configure()
    import torch
    import triton
    if not torch.cuda.is_available():
        print("gpu_shadow.py: no CUDA GPU here: this benchmark compares compiled runs on a GPU "
              "(benchmarks/shadow_dispatch.py measures the host side on the CPU)", file=sys.stderr)
        sys.exit(2)
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}", flush=True)

    # M, K, R, L, N per slice (lora_bgmv holds all of K and N in one block: at most 256; a larger R
    # needs more shared memory than an H200 has for the reference runner's launch configuration)
    sizes = {"small 4,32,8,2,3": (4, 32, 8, 2, (32, 16, 16)), "medium 16,64,16,4,3": (16, 64, 16, 4, (64, 32, 32)),
             "wide 64,256,16,4,3": (64, 256, 16, 4, (256, 128, 128))}
    print(f"{'row':28} {'plain ms':>9} {'shadow ms':>10} {'ratio':>6}")
    rows = [(name, (lambda s=s: _step(s, torch))) for name, s in sizes.items()]
    rows.append(("gather/per_step 65536x64", lambda: _gather(torch)))
    rows.append(("gather/per_step 2^20x64", lambda: _gather(torch, T=1 << 20)))
    for name, make in rows:
        if args.rows and not any(name.startswith(r) for r in args.rows.split(",")):
            continue
        plain, shadow = [], []
        t0 = time.perf_counter()
        try:
            for _ in range(3):  # interleaved
                plain += _time_step(make, False, args.reps, torch)
                shadow += _time_step(make, True, args.reps, torch)
        except Exception as e:  # noqa: BLE001  (one row's failure is printed; the others still run)
            print(f"{name:28} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        p, s = statistics.median(plain) * 1e3, statistics.median(shadow) * 1e3
        print(f"{name:28} {p:9.3f} {s:10.3f} {s / p:6.2f}   ({time.perf_counter() - t0:.0f} s with compiles)",
              flush=True)
    if not args.skip_cases:
        _case_rows(args, torch)
    if args.campaigns:
        _campaign_rows([int(w) for w in args.campaigns.split(",")], args.campaign_budget, args.seed, args.warm_up)


def _cache_entries() -> int:
    """Compiled kernels in Triton's cache (one folder each): how many compiles a run added."""
    d = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    try:
        return sum(1 for e in os.scandir(d) if e.is_dir())
    except OSError:
        return 0


def _campaign(device: str, oracle: str | None, workers: int, budget: int, seed: int) -> dict:
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    before = _cache_entries()
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        cmd = [sys.executable, "-m", "fuzzrunner", "fuzz", "--target", "reference_runner", "--device", device,
               "--workers", str(workers), "--seed", str(seed), "--max-examples", "100000", "--budget", str(budget),
               "--no-shrink", "--corpus", os.path.join(tmp, "c"), "-q", "--report", report]
        cmd += ["--oracle", oracle] if oracle else []
        env = {k: v for k, v in os.environ.items() if k not in ("FUZZRUNNER_DEVICE", "FUZZRUNNER_SHADOW")}
        p = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=dict(env, PYTHONPATH=root))
        try:
            run = json.load(open(report))["runs"][0]
        except (OSError, ValueError, KeyError, IndexError):
            return {"error": f"exit {p.returncode}: {p.stderr.strip()[-300:]}"}
    line = run.get("timeline") or [[0.0, 0, 0]]
    half = next((p for p in line if p[0] >= run["duration_s"] / 2), line[-1])
    end = line[-1]
    steady = (end[1] - half[1]) / (end[0] - half[0]) if end[0] > half[0] else 0.0
    shards = run["settings"].get("workers") or workers  # a one-worker GPU campaign runs its pre-check's shards
    busy = run.get("worker_s", 0.0) / max(run["duration_s"] * shards, 1e-9)
    unchecked = sum(c.get("count", 1) for c in run.get("tool_limitations", []))
    first = line[0][0] if run.get("timeline") else run["duration_s"]  # when the first case ended
    return {"examples": run["examples"], "s": run["duration_s"], "findings": len(run["findings"]), "steady": steady,
            "first": first,
            "unchecked": unchecked,
            "busy": busy, "compiles": _cache_entries() - before,
            "restarts": run["worker_restarts"] + run.get("worker_recycles", 0)}


def _warm_up(workers: int, seconds: int, seed: int) -> None:
    """Shadow campaigns on cuda (other seeds) until ``seconds`` are spent or one compiles nothing new:
    a nightly machine's Triton cache, which keeps what every earlier night compiled."""
    spent, round_ = 0.0, 1
    while spent < seconds:
        budget = int(min(60, max(20, seconds - spent)))
        r = _campaign("cuda", "shadow", workers, budget, seed + round_)
        spent += r.get("s", budget)
        print(f"(warm-up {round_}: shadow campaign on cuda, seed {seed + round_}: {r.get('examples')} cases in "
              f"{r.get('s', 0):.0f} s, {r.get('compiles')} kernels compiled)", flush=True)
        if "error" in r or not r.get("compiles"):
            return
        round_ += 1


def _campaign_rows(workers: list[int], budget: int, seed: int, warm_s: int) -> None:
    print(f"\ncampaigns: reference_runner, {budget} s budget, seed {seed}, {os.cpu_count()} CPUs; 1st at: s from the "
          f"shards' search start to their first case's end (the workers' start-up: zygote imports, CUDA; the "
          f"shards' own imports come before, within s); "
          f"busy: the workers' "
          f"share of the time on cases (worker_s);\ncompiled: kernels the campaign added to Triton's cache; "
          f"restarts: workers started again (deaths and memory recycles); unchecked: the report's tool-limitation "
          f"counts summed (kernels run unchecked, and any other limit; a clean runner should show 0)", flush=True)
    _warm_up(max(workers), warm_s, seed)
    print(f"{'campaign':38} {'cases':>7} {'s':>6} {'1st at':>6} {'cases/s':>8} {'2nd half':>9} {'busy':>5} "
          f"{'compiled':>9} {'restarts':>9} {'findings':>9} {'unchecked':>9}")
    for w in workers:
        rates, steady = {}, {}
        for label, device, oracle in (("cuda, default oracles", "cuda", None),
                                      ("cuda, --oracle shadow (device)", "cuda", "shadow"),
                                      ("cpu, --oracle shadow (interpreter)", "cpu", "shadow")):
            r = _campaign(device, oracle, w, budget, seed)
            label = f"{w} worker(s), {label}"
            if "error" in r:
                print(f"{label:38} failed: {r['error']}", flush=True)
                continue
            rates[device + str(oracle)], steady[device + str(oracle)] = r["examples"] / r["s"], r["steady"]
            print(f"{label:38} {r['examples']:7} {r['s']:6.1f} {r['first']:6.1f} {r['examples'] / r['s']:8.2f} "
                  f"{r['steady']:9.2f} "
                  f"{100 * r['busy']:4.0f}% {r['compiles']:9} {r['restarts']:9} {r['findings']:9} "
                  f"{r['unchecked']:9}", flush=True)
        g, c = "cudashadow", "cpushadow"
        if rates.get(g) and rates.get(c):
            print(f"{w} worker(s): GPU shadow campaign / CPU shadow campaign, cases/s: {rates[g] / rates[c]:.1f}x "
                  f"over the whole campaign, {steady[g] / max(steady[c], 1e-9):.1f}x over its second half", flush=True)


def _case_rows(args, torch) -> None:
    from fuzzrunner import replay
    cases = _cases(args.cases, args.seed)
    os.environ["FUZZRUNNER_SHADOW"] = "device"
    times: dict = {"plain": [], "shadow": []}
    found = 0
    t_warm = time.perf_counter()
    for c in cases:  # compile every kernel and twin the cases reach, outside the timing (a warm cache)
        replay(c, oracles=[], device="cuda")
        replay(c, oracles=["shadow"], device="cuda")
    for c in cases:
        for mode in ("plain", "shadow"):
            t0 = time.perf_counter()
            vs = replay(c, oracles=[] if mode == "plain" else ["shadow"], device="cuda")
            torch.cuda.synchronize()
            times[mode].append(time.perf_counter() - t0)
            if mode == "shadow":
                found += sum(1 for v in vs if v.kind != "tool-limitation")
    p, s = (statistics.median(times[m]) * 1e3 for m in ("plain", "shadow"))
    rp, rs = (len(cases) / sum(times[m]) for m in ("plain", "shadow"))
    per_case = statistics.median(b / a for a, b in zip(times["plain"], times["shadow"]))
    print(f"\ncases: {len(cases)} generated reference_runner cases (seed {args.seed}, no fault), replayed on cuda "
          f"after one untimed pass of each mode ({time.perf_counter() - t_warm - sum(map(sum, times.values())):.0f} s: "
          f"the compiles)")
    print(f"{'mode':28} {'ms/case':>9} {'cases/s':>9}   (ms/case: the median case)")
    print(f"{'plain (no oracle)':28} {p:9.2f} {rp:9.1f}")
    print(f"{'shadow, device mode':28} {s:9.2f} {rs:9.1f}   ratio per case {per_case:.2f} (median), "
          f"of the totals {rp / rs:.2f}")
    print(f"violations reported by the device mode on these fault-free cases: {found}")
    from fuzzrunner.oracles.shadow.gpu import dispatch_filter
    print(f"dispatch filter: {dispatch_filter.status()}")
    if args.cpu_cases <= 0:  # (no CPU row asked for: no ratio to it)
        return
    rate, n = _cpu_rate(cases[:args.cpu_cases])
    print(f"{'shadow, CPU (interpreter)':28} {1e3 / rate:9.2f} {rate:9.1f}   on the first {n} cases, in a "
          f"subprocess on this host's CPUs")
    print(f"GPU shadow cases/s / CPU shadow cases/s: {rs / rate:.1f}x", flush=True)
    if args.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for c in cases[:args.profile]:
            replay(c, oracles=["shadow"], device="cuda")
        prof.disable()
        print(f"\nhost profile of {args.profile} shadow replays (tottime):", flush=True)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
