"""What a vLLM release's source says about V0 and V1 (docs/findings/), read from its files, never imported.

    python -m targets.vllm_lora.source_facts [--wheels DIR] VERSION...
        (markdown; reads the tree scripts/vllm_setup.sh made, else the release's wheel, read in place, from
        .cache/vllm/wheels/ or DIR: ``pip download vllm==VERSION --no-deps -d DIR``)

Per release, with ``file:line`` of each fact:

* the option: ``LoRAKernelMeta.meta_args(token_nums, specialize_active_lora)``, and how the count travels
  (a CPU tensor ``num_active_loras_cpu`` from 0.17; a Python int in 0.16, which torch.compile bakes at trace
  time: vllm-project/vllm#34119);
* V1's two halves: the dummy mapping for capture key k has no no-LoRA token (``maybe_select_dummy_loras``'s
  cycle is ``range(1, ...)``) and the V1 runner dispatches on its count of LoRA requests
  (``len(self.input_batch.lora_id_to_lora_request)``), the V2 runner on ``get_num_active_loras_for_dispatch``;
* V0: the V2 model runner's dummy path programs no mapping (``# FIXME(woosuk): Fix warmup for LoRA.``), and
  whether that runner is the default (``VLLM_USE_V2_MODEL_RUNNER``).
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

from .site import CACHE, site_dirs


class _Tree:
    """A release's files: its set-up tree, else its wheel under the cache (read in place, not extracted)."""

    def __init__(self, version: str, wheel_dirs: tuple = ()):
        self.root = site_dirs(version)[0]
        wheels = sorted(w for d in (CACHE / "wheels", *wheel_dirs) for w in Path(d).glob(f"vllm-{version}-*.whl"))
        self.zip = zipfile.ZipFile(wheels[0]) if not self.root.is_dir() and wheels else None

    def __bool__(self) -> bool:
        return self.root.is_dir() or self.zip is not None

    def text(self, rel: str) -> str | None:
        if self.root.is_dir():
            f = self.root / rel
            return f.read_text(encoding="utf-8", errors="replace") if f.is_file() else None
        try:
            return self.zip.read(rel).decode("utf-8", errors="replace") if self.zip else None
        except KeyError:
            return None


def _find(root: _Tree, rel: str, pattern: str) -> str:
    """``rel:line`` of the first line matching ``pattern`` (a regex), or ''."""
    text = root.text(rel)
    if text is None:
        return ""
    for i, line in enumerate(text.splitlines(), 1):
        if re.search(pattern, line):
            return f"{rel.removeprefix('vllm/')}:{i}"
    return ""


def _moe_flag(root: _Tree) -> str:
    """``punica_gpu.py:line`` of an ``add_lora_fused_moe`` that launches without checking ``no_lora_flag_cpu``
    (after an all-no-LoRA batch ``prepare_tensors`` returns early and the naive kernel reads a stale
    ``token_lora_mapping``), '' where it checks it or does not exist."""
    text = root.text("vllm/lora/punica_wrapper/punica_gpu.py")
    if text is None:
        return ""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if "def add_lora_fused_moe" in ln), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("def ")), len(lines))
    checks = any("no_lora_flag" in ln for ln in lines[start:end])
    return "" if checks else f"lora/punica_wrapper/punica_gpu.py:{start + 1}"


def facts(version: str, wheel_dirs: tuple = ()) -> dict:
    root = _Tree(version, wheel_dirs)
    meta = "vllm/lora/ops/triton_ops/lora_kernel_metadata.py"
    mixin = "vllm/v1/worker/lora_model_runner_mixin.py"
    v1 = "vllm/v1/worker/gpu_model_runner.py"
    v2 = "vllm/v1/worker/gpu/model_runner.py"
    option = _find(root, meta, r"specialize_active_lora: bool")
    tensor = _find(root, meta, r"num_active_loras_cpu\[0\] = ")
    as_int = _find(root, meta, r"self\.num_active_loras = lora_ids\.size\(0\)")
    cycle = _find(root, mixin, r"range\(1, effective_num_loras \+ 1\)\)\s*,")
    dispatch_v1 = _find(root, v1, r"len\(self\.input_batch\.lora_id_to_lora_request\)")
    dispatch_v2 = _find(root, "vllm/v1/worker/gpu/lora_utils.py", r"return len\(lora_state\.get_activate_loras")
    fixme = _find(root, v2, r"Fix warmup for LoRA")
    v2_default = _find(root, "vllm/envs.py", r"VLLM_USE_V2_MODEL_RUNNER: bool")
    default_line = ""
    if v2_default:
        text = root.text("vllm/envs.py") or ""
        m = re.search(r"VLLM_USE_V2_MODEL_RUNNER: bool[^=\n]*= *([^\n]+)", text)
        default_line = m.group(1).strip() if m else ""
    elif root.text(v2) is not None and root.text(v1) is None:
        default_line = "the only runner (no V1 runner)"  # 0.34: gpu_model_runner.py and the variable are gone
    moe = _moe_flag(root)
    naive = _find(root, "vllm/lora/ops/triton_ops/fused_moe_lora_op.py", r"naive_block_assignment")
    return {"version": version, "moe_no_flag_check": moe, "moe_naive": naive,
            "option": option, "count": tensor or as_int,
            "count_kind": "CPU tensor" if tensor else ("Python int (#34119)" if as_int else ""),
            "dummy_without_no_lora": cycle, "dispatch_v1": dispatch_v1, "dispatch_v2": dispatch_v2,
            "v2_dummy_maps_nothing": fixme, "v2_default": default_line,
            "V1": bool(option and cycle and (dispatch_v1 or dispatch_v2)), "V0": bool(fixme)}


def main(argv: list[str]) -> int:
    wheel_dirs: tuple = ()
    if argv[:1] == ["--wheels"]:  # more folders of downloaded wheels (pip download vllm==V --no-deps -d DIR)
        wheel_dirs, argv = (argv[1],), argv[2:]
    print("| vLLM | specialize_active_lora | count | dummy mapping w/o no-LoRA | dispatch count (V1 / V2 runner) "
          "| V2 dummy run maps nothing | V2 runner default | MoE launch w/o no-LoRA check "
          "| MoE naive block assignment | V1 by source | V0 by source | M1 by source |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for v in argv:
        if not _Tree(v, wheel_dirs):
            print(f"| {v} | not set up | | | | | | | | | | |")
            continue
        f = facts(v, wheel_dirs)
        print(f"| {v} | {f['option'] or 'no'} | {f['count_kind']} {f['count']} | {f['dummy_without_no_lora'] or '–'} "
              f"| {f['dispatch_v1'] or '–'} / {f['dispatch_v2'] or '–'} | {f['v2_dummy_maps_nothing'] or '–'} "
              f"| {f['v2_default'] or '?'} | {f['moe_no_flag_check'] or '–'} | {f['moe_naive'] or '–'} "
              f"| {'yes' if f['V1'] else 'no'} | {'yes (V2 runner)' if f['V0'] else 'no'} "
              f"| {'yes' if f['moe_no_flag_check'] and f['moe_naive'] else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
