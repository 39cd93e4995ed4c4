"""``vllm_engine``'s prompt scoring beyond prompt logprobs (targets/vllm_engine/prompt_scores.py): the case fields
(``score_ids``, ``prompt_start``) drawn per release shape and checked, the release shape read from the worker, the
output oracle of ``compute_prompt_token_id_logprobs`` both ways, and P1's label on its logits rows; no vLLM import."""

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzrunner.errors import InvalidCase
from fuzzrunner.oracles.numeric import Comparison, mismatch
from fuzzrunner.target import _import_object

_import_object("targets.vllm_lora:vllm_available")  # puts the repository root (targets/) on sys.path

from targets.vllm_engine import known, prompt_scores  # noqa: E402
from targets.vllm_engine.prompt_scores import Scoring, TokenIdScores  # noqa: E402

SHAPES = {"0.31": Scoring("flat", False), "0.33": Scoring("rows", False), "0.34": Scoring("rows", True)}


@pytest.mark.parametrize("release", sorted(SHAPES))
@settings(max_examples=30, deadline=None, database=None)
@given(data=st.data(), prompt=st.integers(2, 7))
def test_each_drawn_request_is_one_the_release_takes(release, data, prompt):
    scoring = SHAPES[release]
    r = {"id": "a", "tokens": 2, "prompt": prompt, "prompt_logprobs": True}
    r.update(data.draw(prompt_scores.request_fields(scoring, prompt, 32)))
    prompt_scores.check_request(0, r, 32)
    start = r.get("prompt_start", 0)
    assert 0 <= start <= prompt - 2
    if start and not scoring.start_all:
        assert "score_ids" in r  # 0.31 - 0.33: a start only with ids
    ids = r.get("score_ids")
    if ids is not None and scoring.ids == "flat":
        assert len(set(ids)) == len(ids) and all(isinstance(t, int) for t in ids)
    elif ids is not None:
        assert len(ids) == prompt - 1 - start and all(1 <= len(row) <= prompt_scores.MAX_IDS for row in ids)
    assert r["prompt_logprobs"] or ids is not None


@pytest.mark.parametrize("fields, rule", [
    ({"prompt_start": 4}, "from 0 to prompt - 2"),
    ({"prompt_start": 1, "prompt_logprobs": False}, "needs prompt_logprobs or score_ids"),
    ({"score_ids": [[1], [2]]}, "prompt - 1 - prompt_start = 4 rows"),
    ({"score_ids": [1, 32]}, "each id in 0..31"),
    ({"score_ids": []}, "a list of token ids"),
])
def test_a_malformed_request_is_refused_in_one_line_naming_the_rule(fields, rule):
    r = {"id": "a", "tokens": 2, "prompt": 5, "prompt_logprobs": True, **fields}
    with pytest.raises(InvalidCase) as e:
        prompt_scores.check_request(3, r, 32)
    assert rule in str(e.value) and "op 3" in str(e.value) and "\n" not in str(e.value), str(e.value)


@dataclass
class _Flat:
    token_ids: object
    start: int


@dataclass
class _Rows:
    token_ids: object
    pad: object
    start: int


class _Worker:
    def compute_prompt_logprobs(self, logits_fn, hidden_states, input_batch):
        return {}

    def compute_prompt_token_id_logprobs(self, logits_fn, hidden_states, input_batch, prompt_lens):
        return {}


class _Worker34(_Worker):
    def compute_prompt_logprobs(self, logits_fn, hidden_states, input_batch):
        prompt_logprob_start = self.prompt_logprob_start  # noqa: F841 - its source is what find reads
        return {}


def test_the_release_shape_is_read_from_its_worker():
    assert prompt_scores.find(SimpleNamespace(_TokenIdScores=_Flat), _Worker) == SHAPES["0.31"]
    assert prompt_scores.find(SimpleNamespace(_TokenIdScores=_Rows), _Worker) == SHAPES["0.33"]
    assert prompt_scores.find(SimpleNamespace(_TokenIdScores=_Rows), _Worker34) == SHAPES["0.34"]

    class Old:  # 0.15 - 0.28: prompt logprobs only
        def compute_prompt_logprobs(self):
            return {}
    assert prompt_scores.find(SimpleNamespace(), Old) is None


# -- the output oracle ---------------------------------------------------------------------------------------
class _Ctx:
    def __init__(self):
        self.problems, self.wrong = [], []

    def check(self, label, problems):
        self.problems += problems

    def compare(self, label, actual, expected, dtype):
        if mismatch(Comparison(label, actual, expected, dtype)) is not None:
            self.wrong.append(label)


def _batch(tokens, idx):
    qsl = np.concatenate([[0], np.cumsum(tokens)]).astype(np.int32)
    return SimpleNamespace(req_ids=[f"r{i}" for i in range(len(tokens))], idx_mapping_np=np.array(idx),
                           num_scheduled_tokens=np.array(tokens), query_start_loc_np=qsl)


def _scores(ids, start, logits, rows):
    """What vLLM returns: row i scores ``ids[i]`` (or the flat ids) under the logits of prompt position start + i."""
    out = []
    for i, p in enumerate(range(start, start + rows)):
        row_ids = ids[i] if isinstance(ids[0], list) else ids
        width = max(map(len, ids)) if isinstance(ids[0], list) else len(ids)
        lp = torch.log_softmax(logits[p], -1)
        out.append(torch.cat([lp[row_ids], torch.full((width - len(row_ids),), float("-inf"), dtype=lp.dtype)]))
    return torch.stack(out).float()


@pytest.mark.parametrize("ids", [[3, 9], [[3, 9], [4], [5, 6]]])
def test_the_token_id_scores_oracle_is_silent_on_the_right_output_and_catches_each_wrong_one(ids):
    """One request, a 6-token prompt from start 2 (3 scored rows: positions 2, 3, 4), in chunks of 4 and 2."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 32, generator=g, dtype=torch.float64)

    def run(second_out, first_out=None):
        ctx = _Ctx()
        o = TokenIdScores(SimpleNamespace(ctx=ctx))
        o.add({"id": "r0", "score_ids": ids, "prompt_start": 2})
        plen = np.array([6])
        o.check("step", first_out or {}, _batch([4], [0]), np.array([0]), plen, {m: logits[m] for m in range(4)})
        o.check("step", second_out, _batch([2], [0]), np.array([4]), plen, {m: logits[4 + m] for m in range(2)})
        return ctx
    right = _scores(ids, 2, logits, 3)
    ctx = run({"r0": right})
    assert ctx.problems == [] and ctx.wrong == []
    shifted = _scores(ids, 1, logits, 3)  # each row under the position before it
    assert run({"r0": shifted}).wrong == ["step.prompt_token_ids.scores"]
    assert "returned no scores" in run({}).problems[0]
    assert "shape (2," in run({"r0": right[:2]}).problems[0]
    early = run({"r0": right}, first_out={"r0": right})
    assert any("does not complete its prompt" in p for p in early.problems)
    if isinstance(ids[0], list):  # a padded column must be -inf, and only those
        assert "-inf at" in run({"r0": right.nan_to_num(neginf=0.0)}).problems[0]


def test_p1_is_named_on_the_token_id_paths_logits_rows_until_that_path_maps_them():
    f = {"signature": {"tool": "numeric"}, "case": {"config": {}, "ops": [{"op": "step"}]},
         "violation": {"kind": "numeric-mismatch", "tensor": "step.prompt_token_id_logits[0].adapter_rows",
                       "details": {"op_index": 0}}}
    assert known.known_bug(f, logits_mapped_per_row=True) == "P1"
    # docs/findings/p1_prompt_logprobs_mapping.patch maps compute_prompt_logprobs' rows only: still P1 here
    assert known.known_bug(f, logits_mapped_per_row=True, prompt_rows_mapped=True) == "P1"
    assert known.known_bug(f, logits_mapped_per_row=True, token_id_rows_mapped=True) is None
    out = dict(f, violation=dict(f["violation"], tensor="step.prompt_token_ids.scores"))
    assert known.known_bug(out, logits_mapped_per_row=True) is None  # the output: a planted fault's, or new


def test_p1s_out_of_bounds_form_is_named_by_the_call_it_happened_in_not_by_what_else_the_case_holds():
    """A prompt path's logits call holds fewer rows than the sampled rows the lm_head mapping holds (the token-id path
    takes one request's prompt rows at a time): vLLM's LoRA kernel reaches past the call's rows (seed 1's clean
    campaign on 0.33.0). P1 only where the access was made inside that call (``details["region"]``, set by
    prompt_logprobs.py): the same out-of-bounds read in another layer's call, in a step that also scores prompt ids
    and runs lm_head, is a new bug (the rule keyed on the case's lm_head and score_ids called it P1)."""
    step = {"op": "step", "reqs": [{"id": "a", "lora": 2, "tokens": 3, "prompt_logprobs": True},
                                   {"id": "b", "lora": 0, "tokens": 2, "prompt": 4, "score_ids": [[1], [2], [3]]}]}
    sites = {"vllm/lora/punica_wrapper/punica_gpu.py:310": "punica_gpu.py::PunicaWrapperGPU.add_lora_logits"}

    def oob(region=None, tensor="torch.empty@vllm/lora/punica_wrapper/punica_gpu.py:310", kernel="_lora_shrink_kernel"):
        details = {"op_index": 0, "sites": sites, **({"region": region} if region else {})}
        return {"signature": {"tool": "shadow"}, "case": {"config": {"layers": ["lm_head", "qkv_proj"]}, "ops": [step]},
                "violation": {"tool": "shadow", "kind": "out-of-bounds", "kernel": kernel, "tensor": tensor,
                              "details": details}}
    on_path = oob("step.prompt_token_id_logits[1]")
    assert known.known_bug(on_path, logits_mapped_per_row=True) == "P1"
    assert known.known_bug(on_path, logits_mapped_per_row=True, token_id_rows_mapped=True) is None  # its fix: new
    x = oob("step.prompt_token_id_logits[0]", tensor="_lora_shrink_kernel:input_ptr")
    assert known.known_bug(x, logits_mapped_per_row=True) == "P1"  # the call's input read past its rows
    prompt = oob("step.prompt_logits[0]", tensor="_lora_expand_kernel:out_ptr", kernel="_lora_expand_kernel")
    assert known.known_bug(prompt, logits_mapped_per_row=True) == "P1"  # compute_prompt_logprobs' chunk: the same
    assert known.known_bug(prompt, logits_mapped_per_row=True, prompt_rows_mapped=True) is None
    # outside the prompt paths' calls: the sampled rows' logits, or another layer's shrink in the same step
    assert known.known_bug(oob(), logits_mapped_per_row=True) is None
    assert known.known_bug(oob(tensor="_lora_shrink_kernel:input_ptr"), logits_mapped_per_row=True) is None
    assert known.known_bug(oob("step.prompt_token_id_logits[0]", kernel="aten.index.Tensor"),
                           logits_mapped_per_row=True) is None  # not a LoRA kernel
    # the same store past the buffer, named after the allocation the allocator put nearest it (0.33.0's clean
    # campaign, seed 0: LoRAKernelMeta's; its twin finding, the same access, was named after the buffer): the region
    # names the call, whatever allocation is named
    meta = "torch.empty@vllm/lora/ops/triton_ops/lora_kernel_metadata.py:58"
    for kernel in ("_lora_shrink_kernel", "_lora_expand_kernel"):
        near = oob("step.prompt_token_id_logits[0]", tensor=meta, kernel=kernel)
        assert known.known_bug(near, logits_mapped_per_row=True) == "P1", kernel
        assert known.known_bug(near, logits_mapped_per_row=True, token_id_rows_mapped=True) is None
        assert known.known_bug(oob(tensor=meta, kernel=kernel), logits_mapped_per_row=True) is None
