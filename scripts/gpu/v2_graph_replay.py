"""The V2 runner's LoRA graphs on cuda: real ``torch.cuda.CUDAGraph``s against what ``vllm_engine`` plays instead.

``vllm_engine`` has no CUDA graph on the CPU: a step that the V2 runner's dispatch gives a graph runs the layers under
the host decisions that graph's capture froze (targets/vllm_engine/v2_graphs.py, ``api.frozen``). This script checks
that stand-in against real graphs on a GPU: in a fresh process per vLLM (as shipped, then with V1's fix as
``FUZZRUNNER_VLLM_PATCH``), each case's session captures, after vLLM's own capture hook programmed each descriptor's
dummy LoRA mapping, a real ``torch.cuda.CUDAGraph`` of each LoRA linear layer, and every step its dispatch gives a
graph replays it on the step's input; the replayed rows are compared with the stand-in's (must be equal) and with the
eager step's (equal, except where V1 drops an adapter: the ``v1`` case as shipped).

One line per step and layer: ``<vllm> <case> step <i> <layer> <mode>/<tokens>/<key>: real==stand-in <bool>
real==eager <bool> (expected ...) OK|UNEXPECTED``; the last line is ``V2-GRAPH-CHECK: PASS|FAIL``.

Needs the vLLM tree (``python3 scripts/gpu_acceptance.py --steps vllm-tree``) with the V2 runner's graph modules
(0.33.0's carries them). About two minutes.
Usage: python3 scripts/gpu/v2_graph_replay.py        (``--dry``: on the CPU, the stand-in as the "real" graph: the
plumbing only)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
from acceptance_tools import PY, ROOT, V1_PATCH, Verdict, base_env, vllm_site  # noqa: E402

CHILD = r"""
import importlib, json, sys
import torch
from fuzzrunner.case import Case
from fuzzrunner.execute import run_case
from fuzzrunner.target import load_target

device, dry, cases = sys.argv[1], sys.argv[2] == "dry", json.loads(sys.argv[3])
target = load_target("vllm_engine")
pkg = target.run.func.__module__.rsplit(".", 1)[0]
v2, model = importlib.import_module(pkg + ".v2_graphs"), importlib.import_module(pkg + ".model")
S = v2.V2GraphSession
LINEAR = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
capture, forward_step = S.capture_model, S.forward_step

def real_graphs(self, desc):
    # a real graph per linear layer, captured under the mapping vLLM's hook just programmed
    out = {}
    for name in [x for x in self.c["layers"] if x in LINEAR]:
        layer = self.module(name)
        x = torch.zeros(desc.num_tokens, model.input_size(self.c, name), device=self.device, dtype=self.dtype)
        if dry:
            out[name] = (None, x, None)
            continue
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            layer(x)  # warm-up: kernels compiled, vLLM's pointer tables filled outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = layer(x)
        out[name] = (g, x, y[0] if isinstance(y, tuple) else y)
    return out

def capture_model(self):
    self.real = {}
    hook = self.g.capture_hook(self.cfg.lora_config, self.runner)
    m = self.manager
    with self.runner.maybe_setup_dummy_loras(self.cfg.lora_config):
        for mode in (self.g.CUDAGraphMode.PIECEWISE, self.g.CUDAGraphMode.FULL):
            for desc in m._capture_descs.get(mode, []):
                hook(desc.num_active_loras, desc.num_reqs or min(desc.num_tokens, m.max_num_reqs), desc.num_tokens)
                self.graphs[desc] = self._frozen()
                self.real[desc] = real_graphs(self, desc)
    m._graphs_captured = True

def run(layer, x):
    y = layer(x)
    return y[0] if isinstance(y, tuple) else y

def step(self, op, reqs, new, rows, logits_rows, prompt_rows):
    desc, n = self.dispatch(reqs, new)
    if desc.cg_mode == self.g.CUDAGraphMode.NONE:
        return
    gen = torch.Generator().manual_seed(op.get("seed", 0))
    for name, (g, xs, ys) in self.real[desc].items():
        layer = self.module(name)
        x = torch.randn(n, xs.shape[1], generator=gen).to(self.device, self.dtype)
        eager = run(layer, x)[:n].float().cpu()
        xs.zero_()
        xs[:n] = x
        flag, z = self.graphs[desc]
        with self.found["api"].frozen(self.meta, flag, z, self.c["specialize_active_lora"]):
            stand_in = run(layer, xs)[:n].float().cpu()
            if dry:
                real = run(layer, xs)[:n].float().cpu()
        if not dry:
            g.replay()
            torch.cuda.synchronize()
            real = ys[:n].float().cpu()
        print("ROW", json.dumps({"op": self.op_index, "layer": name, "graph": f"{desc.cg_mode.name}/{desc.num_tokens}/"
                                 f"{desc.num_active_loras}", "stand_in": bool(torch.equal(real, stand_in)),
                                 "eager": bool(torch.allclose(real, eager, atol=1e-2, rtol=1e-2))}), flush=True)

S.capture_model, S.forward_step = capture_model, step
orig_step = S.step
def numbered(self, op):
    self.op_index = getattr(self, "op_index", -1) + 1
    return orig_step(self, op)
S.step = numbered
for name, d in cases.items():
    print("CASE", name, flush=True)
    vs = run_case(Case.from_dict(d), target, device=device, oracles=["numeric"])
    print("DONE", name, len(vs), flush=True)
"""


def cases() -> dict:
    """Two adapters and a base-model request, then a uniform decode step of the adapters' requests (a FULL decode
    graph where the mode has one); with and without ``specialize_active_lora``."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from test_vllm_engine_target import CONFIG, req, step

    from fuzzrunner.case import Case
    ops = (step(req("a", 1, 2), req("b", 0, 2), req("c", 3, 2), seed=1),
           step(req("a", 1, 2, drafts=1), req("c", 3, 2, drafts=1), finish=["b"], seed=2))
    graphs = {"cudagraph_capture_sizes": [2, 4, 8], "cudagraph_specialize_lora": True, "num_speculative_tokens": 1,
              "layers": ["qkv_proj", "down_proj"]}
    out = {}
    for mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
        for spec in (True, False):
            cfg = {**CONFIG, **graphs, "cudagraph_mode": mode, "specialize_active_lora": spec}
            out[f"{mode}{'-specialize' if spec else ''}"] = json.loads(Case("vllm_engine", cfg, ops, ()).to_json())
    return out


def expected(patched: bool, case: str, row: dict) -> tuple[bool, bool]:
    """(real == stand-in, real == eager): V1 drops c (adapter 3: q_proj and v_proj only, so in qkv_proj) from the
    mixed batch's key-2 graph with the option, as shipped."""
    v1 = not patched and case.endswith("-specialize") and row["op"] == 0 and row["layer"] == "qkv_proj"
    return True, not v1


def child(device: str, dry: bool, patched: bool) -> tuple[int, str]:
    env = base_env(FUZZRUNNER_VLLM_VERSION="0.33.0") if dry else base_env(FUZZRUNNER_VLLM_SITE=str(vllm_site()))
    if dry:
        env["TRITON_INTERPRET"] = "1"
    if patched:
        env["FUZZRUNNER_VLLM_PATCH"] = str(V1_PATCH)
    r = subprocess.run([PY, "-c", CHILD, device, "dry" if dry else "real", json.dumps(cases())], env=env,
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    return r.returncode, r.stdout + ("" if r.returncode == 0 else r.stderr[-3000:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry", action="store_true", help="on the CPU, the stand-in as the graph: the plumbing only")
    args = ap.parse_args(argv)
    ok, rows = True, 0
    try:
        for patched in (False, True):
            name = "vllm+V1-fix" if patched else "vllm"
            rc, out = child("cpu" if args.dry else "cuda", args.dry, patched)
            if rc != 0:
                print(f"{name}: child exit {rc}\n{out}")
                ok = False
                continue
            case = ""
            for line in out.splitlines():
                if line.startswith("CASE "):
                    case = line.split()[1]
                elif line.startswith("ROW "):
                    row = json.loads(line[4:])
                    want = expected(patched, case, row)
                    got = (row["stand_in"], row["eager"])
                    rows += 1
                    ok &= got == want
                    print(f"{name} {case} step {row['op']} {row['layer']} {row['graph']}: real==stand-in {got[0]} "
                          f"real==eager {got[1]} (expected {want[0]} {want[1]}) "
                          f"{'OK' if got == want else 'UNEXPECTED'}")
    except Verdict as v:
        print(f"V2-GRAPH-CHECK: {v.verdict} ({v.why})")
        return 0 if v.verdict == "SKIP" else 1
    ok &= rows > 0
    print(f"V2-GRAPH-CHECK: {'PASS' if ok else 'FAIL'} ({rows} replays compared)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
