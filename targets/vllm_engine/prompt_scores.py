"""The V2 runner's prompt scoring beyond top-k prompt logprobs, as shipped: ``prompt_logprob_token_ids`` and
``prompt_logprob_start`` (vLLM 0.31 and later), for ``vllm_engine``.

After ``compute_prompt_logprobs`` the V2 runner's ``sample_tokens`` calls
``prompt_logprobs_worker.compute_prompt_token_id_logprobs(self.model.compute_logits, hidden_states, input_batch,
self.req_states.prompt_len.np)`` under the same LoRA mapping (the step's). For each request that gave
``SamplingParams.prompt_logprob_token_ids`` it takes the logits of its prompt rows from ``prompt_logprob_start`` on
(the last prompt row excluded) through ``logits_fn``, chunk by chunk of a chunked prefill, and returns, in the step
that completes the prompt, one row per scored position: row ``i`` holds the log-probabilities of the given ids as
predictions of prompt token ``start + i + 1``. The shapes, read from the release (``find``):

* ``flat`` (0.31): one list of distinct ids scored at every row; ``prompt_logprob_start`` only with ids, kept per
  request (``_TokenIdScores.start``); the result has ``max(prompt_len - 1 - start, 0)`` rows;
* ``rows`` (0.33 on): an id array ``[num_rows, num_ids]`` (vLLM's validation pads ragged lists with -1: those columns
  score ``-inf``), ``num_rows = prompt_len - 1 - start`` (the input processor's rule);
* ``start_all`` (0.34): ``prompt_logprob_start`` per request index (``worker.prompt_logprob_start``), for
  ``prompt_logprobs`` too (their rows before it skipped) and allowed without ids; a non-zero start below
  ``prompt_len - 1``.

A new request's case fields (V2 runner): ``score_ids`` (the ids, as a user passes them) and ``prompt_start``; vLLM's
own ``SamplingParams`` validation (``_validate_logprobs``, as ``verify`` calls it) takes them, the input processor's
two rules above re-stated. Oracles: every ``logits_fn`` call's rows against the float64 reference of the row's
request's adapter (``<label>.prompt_token_id_logits[k]``: base-model rows exact, each adapter's rows their own delta,
as the prompt-logprobs rows), and the output against the specification above, from the logits vLLM computed
(``<label>.prompt_token_ids.scores``; returned early, late or twice: a state violation).
"""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace

import numpy as np
import torch
from hypothesis import strategies as st

from fuzzrunner.errors import InvalidCase, UnsupportedCase

MAX_IDS = 3  # ids per scored row (vLLM's max_logprobs is 20)


@dataclasses.dataclass(frozen=True)
class Scoring:
    """What prompt scoring a release has (``find``): ``ids`` "flat" or "rows"; ``start_all``: the start applies to
    prompt logprobs too."""
    ids: str
    start_all: bool


def find(module, worker) -> Scoring | None:
    """The release's shape, from its worker (``compute_prompt_token_id_logprobs``: 0.31 on), or None."""
    if not hasattr(worker, "compute_prompt_token_id_logprobs"):
        return None
    per_row = "pad" in getattr(getattr(module, "_TokenIdScores", None), "__dataclass_fields__", {})
    start_all = "prompt_logprob_start" in inspect.getsource(worker.compute_prompt_logprobs)
    return Scoring("rows" if per_row else "flat", start_all)


# -- the case -----------------------------------------------------------------------------------------------
@st.composite
def request_fields(draw, scoring: Scoring, prompt: int, vocab: int) -> dict:
    """A prompt-logprobs request's scoring (drawn after its prompt length): prompt logprobs, token ids, or both, and
    a start where the release takes one. ``prompt_logprobs`` False: token ids only."""
    mode = draw(st.sampled_from(["both", "ids", "logprobs"]))
    out: dict = {"prompt_logprobs": False} if mode == "ids" else {}
    if prompt >= 3 and (mode != "logprobs" or scoring.start_all) and draw(st.booleans()):
        out["prompt_start"] = draw(st.integers(1, prompt - 2))
    if mode == "logprobs":
        return out
    n = draw(st.integers(1, MAX_IDS))
    if scoring.ids == "flat":
        out["score_ids"] = sorted(draw(st.sets(st.integers(0, vocab - 1), min_size=n, max_size=n)))
    else:  # ragged rows: vLLM pads them with -1 (scored -inf)
        rows = prompt - 1 - out.get("prompt_start", 0)
        out["score_ids"] = [draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=n)) for _ in range(rows)]
    return out


def check_request(i: int, r: dict, vocab: int) -> None:
    """The case's own rules for ``score_ids`` / ``prompt_start`` (vLLM's validation checks the rest, per release)."""
    prompt = r.get("prompt", r["tokens"])
    start = r.get("prompt_start", 0)
    if not isinstance(start, int) or start < 0 or (start and start >= prompt - 1):
        raise InvalidCase(f"op {i}: request {r['id']!r}: prompt_start {start!r} is a prompt row to score from, an int "
                          f"from 0 to prompt - 2 = {prompt - 2}.")
    if start and not (r.get("prompt_logprobs") or "score_ids" in r):
        raise InvalidCase(f"op {i}: request {r['id']!r}: prompt_start needs prompt_logprobs or score_ids.")
    ids = r.get("score_ids")
    if ids is None:
        return
    flat = isinstance(ids, list) and ids and all(isinstance(t, int) for t in ids)
    rows = isinstance(ids, list) and all(isinstance(row, list) and row and all(isinstance(t, int) for t in row)
                                         for row in ids)
    if not (flat or (rows and len(ids) == prompt - 1 - start)) or \
            any(not 0 <= t < vocab for t in (ids if flat else [t for row in ids for t in row])):
        raise InvalidCase(f"op {i}: request {r['id']!r}: score_ids {ids!r} is a list of token ids (0.31) or one "
                          f"non-empty list per scored row, prompt - 1 - prompt_start = {prompt - 1 - start} rows "
                          f"(0.33 on), each id in 0..{vocab - 1}.")


def sampling_params(f: SimpleNamespace, r: dict, k: int | None, model_config):
    """vLLM's ``SamplingParams`` of request ``r`` (prompt logprobs ``k``), validated by vLLM as ``verify`` does where it
    scores more than prompt logprobs."""
    kw: dict = {"prompt_logprobs": k}
    extra = {"prompt_logprob_token_ids": r.get("score_ids"), "prompt_logprob_start": r.get("prompt_start")}
    extra = {name: v for name, v in extra.items() if v is not None}
    if not extra:
        return f.SamplingParams(**kw)
    scoring = f.scoring
    if scoring is None or ("prompt_logprob_token_ids" in extra and
                           isinstance(extra["prompt_logprob_token_ids"][0], list) != (scoring.ids == "rows")):
        have = "none" if scoring is None else f"the {scoring.ids!r} shape"
        raise UnsupportedCase(f"request {r['id']!r}: score_ids / prompt_start in a shape this vLLM does not take "
                              f"({have}; prompt_logprob_token_ids: a list of ids in 0.31, one list per row from 0.33).")
    sp = f.SamplingParams(**kw, **extra)
    try:
        sp._validate_logprobs(model_config)
    except ValueError as e:
        raise UnsupportedCase(f"request {r['id']!r}: vLLM refuses its prompt scoring: "
                              f"{str(e).splitlines()[0]}") from None
    return sp


# -- the oracle ---------------------------------------------------------------------------------------------
class TokenIdScores:
    """The expected output of ``compute_prompt_token_id_logprobs`` for one session's requests."""

    def __init__(self, session):
        self.s = session
        self.want: dict[str, tuple[list, int, int]] = {}  # request id -> (its ids, start, columns)
        self.rows: dict[str, list[torch.Tensor]] = {}   # request id -> expected score rows so far

    def add(self, r: dict) -> None:
        ids = r.get("score_ids")
        if ids is not None:  # rows: vLLM pads each to the longest (-1)
            width = max(map(len, ids)) if isinstance(ids[0], list) else len(ids)
            self.want[r["id"]] = (ids, r.get("prompt_start", 0), width)
            self.rows[r["id"]] = []

    def remove(self, rid: str) -> None:
        self.want.pop(rid, None)
        self.rows.pop(rid, None)

    def _ids(self, rid: str, i: int) -> list[int]:
        ids = self.want[rid][0]
        return ids[i] if isinstance(ids[0], list) else ids

    def check(self, label: str, out: dict, b: SimpleNamespace, computed: np.ndarray, prompt_len: np.ndarray,
              seen: dict[int, torch.Tensor]) -> None:
        """``out`` (request id -> scores) of a step whose batch is ``b`` against the logits vLLM computed (``seen``:
        batch row -> logits), before the step's tokens are counted as computed."""
        problems, done = [], {}
        for i, rid in enumerate(b.req_ids):
            if rid not in self.want:
                continue
            index = int(b.idx_mapping_np[i])
            c, n, plen = int(computed[index]), int(b.num_scheduled_tokens[i]), int(prompt_len[index])
            _, start, width = self.want[rid]
            for p in range(max(c, start), min(c + n, plen - 1)):  # a scored prompt row
                row = int(b.query_start_loc_np[i]) + p - c
                if row not in seen:
                    problems.append(f"request {rid!r}: prompt position {p} (batch row {row}): its logits were never "
                                    f"computed through logits_fn")
                    continue
                lp = torch.log_softmax(seen[row], dim=-1)
                ids = self._ids(rid, p - start)
                want = torch.full((width,), float("-inf"), dtype=torch.float64)
                want[:len(ids)] = lp[ids]
                self.rows[rid].append(want)
            if c < plen <= c + n:
                done[rid] = self.rows.pop(rid)
                self.want.pop(rid)
        problems += [f"request {rid!r}: prompt token-id scores returned in a step that does not complete its prompt"
                     for rid in out if rid not in done]
        for rid, rows in done.items():
            self._compare(label, rid, rows, out.get(rid), problems)
        if problems:
            self.s.ctx.check(f"{label}.prompt_token_ids", problems)

    def _compare(self, label: str, rid: str, rows: list, got, problems: list[str]) -> None:
        if got is None:
            problems.append(f"request {rid!r}: its prompt completed this step and gave prompt_logprob_token_ids; the "
                            f"worker returned no scores")
            return
        want = torch.stack(rows) if rows else torch.zeros(0, got.shape[-1] if got.dim() == 2 else 0,
                                                          dtype=torch.float64)
        if tuple(got.shape) != tuple(want.shape):
            problems.append(f"request {rid!r}: scores of shape {tuple(got.shape)}, want {tuple(want.shape)} (one row "
                            f"per scored prompt position, one column per id)")
            return
        got = got.detach().cpu().double()
        pads = torch.isinf(want)
        if not torch.equal(torch.isinf(got) & (got < 0), pads):
            problems.append(f"request {rid!r}: -inf at {torch.nonzero(torch.isinf(got)).tolist()[:8]}, want it at the "
                            f"padded ids only {torch.nonzero(pads).tolist()[:8]}")
            return
        self.s.ctx.compare(f"{label}.prompt_token_ids.scores", got.masked_fill(pads, 0.0).float(),
                           want.masked_fill(pads, 0.0), torch.float32)
