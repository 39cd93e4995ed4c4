"""``vllm_engine``'s V1-runner cases build vLLM's ``InputBatch`` and round the capture sizes as ``GPUModelRunner`` does,
in the shape of each release's signatures (targets/vllm_engine/v1_runner.py); no vLLM import: each shape is the
signature as the releases ship it, and every tree set up under .cache/vllm is read (its source parsed, not imported).
Before, the target passed 0.33's keywords: every V1-runner case of 0.17 - 0.31 crashed in ``InputBatch.__init__``
("missing 1 required positional argument: 'kernel_block_sizes'"), and a FULL graph mode with drafts up to 0.31 in
``adjust_cudagraph_sizes_for_spec_decode`` ("missing ... 'tensor_parallel_size'")."""

import ast
import inspect
from pathlib import Path

import pytest

from fuzzrunner.errors import InvalidCase
from fuzzrunner.target import _import_object

_import_object("targets.vllm_lora:vllm_available")  # puts the repository root (targets/) on sys.path

from targets.vllm_engine.v1_runner import input_batch_kwargs, round_sizes_for_spec_decode  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COMMON = "self, max_num_reqs, max_model_len, max_num_batched_tokens, device"
TAIL = "logitsprocs=None, logitsprocs_need_output_token_ids=False"
# InputBatch.__init__'s parameters per release shape (v1/worker/gpu_input_batch.py)
SHAPES = {
    "0.12-0.14": f"{COMMON}, pin_memory, vocab_size, block_sizes, kernel_block_sizes, {TAIL}, is_spec_decode=False, "
                 "is_pooling_model=False, num_speculative_tokens=0, cp_kv_cache_interleave_size=1",
    "0.17": f"{COMMON}, pin_memory, vocab_size, block_sizes, kernel_block_sizes, max_num_blocks_per_req=None, {TAIL}, "
            "is_spec_decode=False, is_pooling_model=False, cp_kv_cache_interleave_size=1",
    "0.21-0.22": f"{COMMON}, pin_memory, vocab_size, block_sizes, kernel_block_sizes, max_num_blocks_per_req=None, "
                 f"{TAIL}, num_spec_tokens=0, is_pooling_model=False, cp_kv_cache_interleave_size=1, "
                 "reasoning_config=None",
    "0.24": f"{COMMON}, vocab_size, block_sizes, kernel_block_sizes, max_num_blocks_per_req=None, {TAIL}, "
            "num_spec_tokens=0, is_pooling_model=False, cp_kv_cache_interleave_size=1, reasoning_config=None",
    "0.28-0.31": f"{COMMON}, vocab_size, block_sizes, kernel_block_sizes, max_num_blocks_per_req, {TAIL}, "
                 "num_spec_tokens=0, is_pooling_model=False, cp_kv_cache_interleave_size=1, reasoning_config=None, "
                 "use_replayssm=False, slot_mapping_modes=None",
    "0.33": f"{COMMON}, vocab_size, block_sizes, max_num_blocks_per_req, {TAIL}, num_spec_tokens=0, "
            "is_pooling_model=False, cp_kv_cache_interleave_size=1, reasoning_config=None, use_replayssm=False, "
            "slot_mapping_modes=None",
}


def _cls(params: str) -> type:
    ns: dict = {}
    exec(f"class InputBatch:\n    def __init__({params}):\n        pass\n", ns)  # noqa: S102 - a signature, no body
    return ns["InputBatch"]


def _kwargs(cls, spec: int = 0) -> dict:
    return input_batch_kwargs(cls, max_num_reqs=4, max_num_batched_tokens=8, device="cpu", vocab_size=32,
                              num_spec_tokens=spec, logitsprocs="procs")


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("spec", [0, 2])
def test_the_input_batch_is_made_with_every_parameter_each_release_shape_takes(shape, spec):
    cls = _cls(SHAPES[shape])
    kw = _kwargs(cls, spec)
    inspect.signature(cls.__init__).bind(None, **kw)  # every required one given, nothing it does not take
    params = inspect.signature(cls.__init__).parameters
    assert kw["block_sizes"] == [16] and kw["logitsprocs"] == "procs" and kw["max_model_len"] == 64
    assert ("kernel_block_sizes" in kw) == ("kernel_block_sizes" in params)
    assert kw.get("pin_memory", False) is False  # the target's host memory is never pinned
    # speculative decoding in the shape the release takes it: a count, or a flag (and a count in 0.12 - 0.14)
    assert kw.get("num_spec_tokens", spec) == spec and kw.get("num_speculative_tokens", spec) == spec
    assert kw.get("is_spec_decode", spec > 0) == (spec > 0)
    assert any(k in kw for k in ("num_spec_tokens", "is_spec_decode"))


def _tree_signature(path: Path) -> str:
    """``InputBatch.__init__``'s parameters as the file writes them, each default replaced by None."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "InputBatch")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    args = init.args
    plain = [a.arg for a in args.args]
    first_default = len(plain) - len(args.defaults)
    return ", ".join(a if i < first_default else f"{a}=None" for i, a in enumerate(plain))


TREES = sorted(p for p in (ROOT / ".cache" / "vllm").glob("*/site/vllm/v1/worker/gpu_input_batch.py"))


@pytest.mark.skipif(not TREES, reason="no vLLM tree set up under .cache/vllm (scripts/vllm_setup.sh VERSION)")
def test_every_tree_set_ups_input_batch_takes_the_keywords_the_target_makes():
    seen = []
    for path in TREES:
        cls = _cls(_tree_signature(path))
        for spec in (0, 1):
            inspect.signature(cls.__init__).bind(None, **_kwargs(cls, spec))
        seen.append(path.parts[-6])
    assert seen, TREES  # the releases read, e.g. ['0.12.0', ..., '0.33.0']


def test_a_required_parameter_no_release_shape_has_is_refused_in_one_line():
    with pytest.raises(InvalidCase) as e:
        _kwargs(_cls(SHAPES["0.33"].replace("device", "device, kv_cache_spec")))
    msg = str(e.value)
    assert "kv_cache_spec" in msg and "runner 'v2'" in msg and "\n" not in msg, msg


class _Sizes:
    def __init__(self, takes_tp: bool):
        self.calls: list = []
        if takes_tp:
            self.adjust_cudagraph_sizes_for_spec_decode = self._with_tp
        else:
            self.adjust_cudagraph_sizes_for_spec_decode = self._without

    def _with_tp(self, uniform_decode_query_len, tensor_parallel_size):
        self.calls.append((uniform_decode_query_len, tensor_parallel_size))

    def _without(self, uniform_decode_query_len):
        self.calls.append((uniform_decode_query_len,))


def test_the_capture_sizes_are_rounded_for_drafts_in_both_shapes_of_compilation_config():
    """0.17 - 0.31: ``adjust_cudagraph_sizes_for_spec_decode(q, tensor_parallel_size)``; 0.33: ``(q)``."""
    old, new = _Sizes(True), _Sizes(False)
    round_sizes_for_spec_decode(old, 3, 1)
    round_sizes_for_spec_decode(new, 3, 1)
    assert old.calls == [(3, 1)] and new.calls == [(3,)]
