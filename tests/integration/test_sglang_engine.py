"""The ``sglang_engine`` target: SGLang's own LoRAManager, LoRAMemoryPool and LoRA layers (docs/sglang.md).

Needs the pinned SGLang set up with its engine's imports (``scripts/setup.sh``: stamp ``engine-ok``);
skipped with the reason otherwise. SGLang's engine is imported whole: every case here runs in one subprocess
(~25 s of import), away from the ``sglang_lora`` target this session loads (the two in one process:
test_sglang_one_process.py).
"""

import json
import os
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

from fuzzrunner.target import _import_object

ROOT = Path(__file__).resolve().parents[2]
AVAILABLE, REASON = _import_object("targets.sglang_engine:engine_available")()
# One xdist group: under `--dist loadgroup` a module's ungrouped tests spread over both workers, each
# setting up the module's fixtures; grouped, `results` (every case in one SGLang subprocess) is set up once per CI run.
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=f"sglang_engine: {REASON}"),
              pytest.mark.xdist_group("sglang_engine")]
# the adapter-management API and admission are driven where the tokenizer manager imports (frontend.py)
FRONTEND = AVAILABLE and (Path(REASON).parent / "frontend-ok").exists()

ALL = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head"]
ADAPTERS = {"a0": {"r": 4, "alpha": 8, "modules": ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                                                   "embed_tokens", "lm_head"]},
            "a1": {"r": 2, "alpha": 2, "modules": ["q_proj", "k_proj", "v_proj", "down_proj"]},
            "a2": {"r": 4, "alpha": 16, "modules": ["o_proj"]}}


def _cfg(backend="triton", slots=2, **kw):
    return {"backend": backend, "max_loras_per_batch": slots, "eviction_policy": "lru", "max_lora_rank": 4,
            "target_modules": ALL, "graph_bs": 0, "chunk": 16, "dtype": "float32", "adapters": ADAPTERS} | kw


# every op, fault-free: mixed and base-only batches, extend and decode, a full pool (3 adapters, 2 slots:
# evictions, reused slots), unload and reload with new weights, the decode graph's static batch info
LIFECYCLE = [{"op": "load", "name": "a0"}, {"op": "step", "reqs": [None, "a0"], "mode": "decode"},
             {"op": "load", "name": "a1"}, {"op": "step", "reqs": ["a1", "a1"], "mode": "extend", "lens": [2, 1]},
             {"op": "load", "name": "a2"}, {"op": "step", "reqs": ["a2", "a0"], "mode": "decode"},
             {"op": "unload", "name": "a0"}, {"op": "load", "name": "a0", "v": 1},
             {"op": "step", "reqs": ["a0", None, "a0"], "mode": "decode"}]
# SGLang's LogitsProcessor over lm_head LoRA: an extend batch asking input logprobs from several starts (one
# request none: its start is its length), with the adapters mixed across the chunked passes, then one without,
# a decode batch, and a batch asking logprobs where no request has a position to give
LP_ADAPTERS = {"a0": {"r": 4, "alpha": 8, "modules": ["q_proj", "v_proj", "o_proj", "lm_head"]},
               "a1": {"r": 2, "alpha": 2, "modules": ["q_proj", "k_proj", "v_proj", "lm_head"]}}
LOGPROBS = [{"op": "load", "name": "a0"}, {"op": "load", "name": "a1"},
            {"op": "step", "reqs": ["a0", None, "a1"], "mode": "extend", "lens": [3, 2, 3], "logprob": [0, 2, 1]},
            {"op": "step", "reqs": ["a1", "a0"], "mode": "extend", "lens": [2, 3]},
            {"op": "step", "reqs": ["a1", "a0"], "mode": "decode"},
            # logprobs asked from every request's last position + 1: none computed (the first clean campaign's
            # target error: SGLang returns None there, not an empty tensor)
            {"op": "step", "reqs": [None, "a0"], "mode": "extend", "lens": [3, 1], "logprob": [3, 1]}]


def _lp_cfg(backend="triton", chunk=2):
    return _cfg(backend, slots=3, adapters=LP_ADAPTERS, logprob_chunk=chunk)


# the minimal case of each planted fault (faults.py), and what finds it
FAULT_CASES = {
    "unload_keeps_slot": (_cfg(), [{"op": "load", "name": "a0"}, {"op": "step", "reqs": ["a0"]},
                                   {"op": "unload", "name": "a0"}], ("state-violation",)),
    "load_keeps_residual_weights": (_cfg(slots=2), [{"op": "load", "name": "a0"}, {"op": "step", "reqs": ["a0"]},
                                                    {"op": "load", "name": "a2"}, {"op": "step", "reqs": ["a2"]}],
                                    ("numeric-mismatch",)),
    # under lru the batch's adapters are marked used before a victim is chosen: only fifo can pick one of them; a0
    # and a1 enter the pool in separate steps (one step's adapters enter in the order of a set of ids, which
    # changes with the process's string hashing: a0 must be the first in, so that the fault's victim is a0)
    # the decode graph of size 1 replays a0's request with the batch info the backend held before any prepare
    "capture_without_lora_batch": (_cfg(graph_bs=2), [{"op": "load", "name": "a0"},
                                                      {"op": "step", "reqs": ["a0"], "mode": "decode"}],
                                   ("numeric-mismatch", "crash")),
    "evict_batch_adapter": (_cfg(slots=3, eviction_policy="fifo"), [{"op": "load", "name": "a0"}, {"op": "load", "name": "a1"},
                                            {"op": "load", "name": "a2"}, {"op": "step", "reqs": ["a0"]},
                                            {"op": "step", "reqs": ["a1"]}, {"op": "step", "reqs": ["a2", "a0"]}],
                            ("crash",)),  # SGLang's prepare looks up the evicted adapter's slot: KeyError
    # passes of 2 rows over a0's 3, the base request's 1 and a1's 2: the second and third pass run a0's routing
    "logprob_pass_stale_routing": (_lp_cfg(), LOGPROBS, ("numeric-mismatch", "crash")),
}
PINNED = dict(ADAPTERS, a1=dict(ADAPTERS["a1"], pinned=True))
# through the tokenizer manager and the scheduler: a pinned adapter, --max-loaded-loras evicting the least
# recently used unpinned one, a request naming an unloaded adapter (reloaded), a batch of more adapters than
# slots (the scheduler splits it), an unload of an unregistered name (refused)
FRONTEND_LIFECYCLE = [{"op": "load", "name": "a1"}, {"op": "load", "name": "a0"},
                      {"op": "step", "reqs": [None, "a0", "a1"], "mode": "decode"},
                      {"op": "load", "name": "a2"}, {"op": "step", "reqs": ["a2", "a0", None, "a1"], "mode": "extend",
                                                     "lens": [1, 2, 1, 1]},
                      {"op": "unload", "name": "a2"}, {"op": "unload", "name": "a2"},
                      {"op": "step", "reqs": ["a2", None], "mode": "decode"}, {"op": "unload", "name": "a1"},
                      {"op": "load", "name": "a1", "v": 1}, {"op": "step", "reqs": ["a1", "a0"], "mode": "decode"}]
FRONTEND_FAULT_CASES = {
    # a1 pinned, then two more than --max-loaded-loras 2 allows: the registry's LRU must skip a1
    "lru_evicts_pinned": (_cfg(adapters=PINNED, max_loaded_loras=2),
                          [{"op": "load", "name": "a1"}, {"op": "load", "name": "a0"}, {"op": "load", "name": "a2"}],
                          ("state-violation",)),
    # two adapters and the base model in one queue, two slots: the scheduler must split them
    "admission_ignores_running": (_cfg(), [{"op": "load", "name": "a0"}, {"op": "load", "name": "a2"},
                                           {"op": "step", "reqs": ["a0", "a2", None]}], ("state-violation",)),
}
if FRONTEND:
    FAULT_CASES |= FRONTEND_FAULT_CASES
# SGLang's scheduler loop and ForwardBatch.init_new (scheduler.py, serving.py; 0.5.23): requests that outlive a
# round (several new tokens), late arrivals, a queue longer than --max-running-requests, chunked prefill, the drainer
SERVED = [{"op": "load", "name": "a0"}, {"op": "load", "name": "a1"}, {"op": "load", "name": "a2"},
          {"op": "step", "reqs": [None, "a0", "a1", "a0", "a2"], "mode": "extend", "lens": [3, 2, 3, 5, 1],
           "new": [2, 3, 1, 2, 2], "arrive": [0, 0, 1, 2, 2]},
          {"op": "step", "reqs": ["a1", None], "mode": "decode", "new": [3, 1]}]


def _sched_cfg(backend="triton", **kw):
    return _cfg(backend, **({"max_running_requests": 4, "chunked_prefill_size": None, "max_prefill_tokens": 16384,
                             "lora_drain_wait_threshold": 0.0} | kw))


SERVED_VARIANTS = [_sched_cfg(), _sched_cfg("csgmv", max_running_requests=2, chunked_prefill_size=2, graph_bs=2),
                   _sched_cfg(slots=3, max_prefill_tokens=4, lora_drain_wait_threshold=1.0)]
_TWO = [{"op": "load", "name": "a0"}, {"op": "load", "name": "a1"}]
# the minimal case of each scheduler-path fault (scheduler_faults.py), and what finds it
SERVER_FAULT_CASES = {
    # a0 is fetched, a1 (the second request's) is not: prepare_lora_batch looks its slot up
    "init_new_fetches_one": (_sched_cfg(), _TWO + [{"op": "step", "reqs": ["a0", "a1"], "mode": "extend",
                                                   "lens": [2, 1]}], ("crash",)),
    # the base model and a0 run 3 rounds; a1 arrives at round 1: admitted against the new batch only, it joins the
    # running batch and the next decode batch needs 3 slots of 2
    # (then one more step: the first was abandoned with its requests in the scheduler, and is not served on; a
    # campaign's target error, KeyError 'r5', came from serving it)
    "admission_ignores_running_batch": (_sched_cfg(), _TWO + [{"op": "step", "reqs": [None, "a0", "a1"],
                                                               "new": [3, 3, 2], "arrive": [0, 0, 1]},
                                                              {"op": "step", "reqs": ["a0", None], "new": [2, 2]}],
                                        ("state-violation",)),
    # a1 starves past 1 round while the base model and a0 fill both slots: one of them drains for it and, never
    # cleared, its later request is never admitted
    # a0's request asks logprobs from its second token, a1's from its first: with the cursor left at a0's rows, a1's
    # input logprobs are a0's (SGLang's own result processing stores them: results.py, 0.5.14+)
    "logprob_cursor_not_advanced": (_sched_cfg(slots=3, adapters=LP_ADAPTERS), _TWO + [
        {"op": "step", "reqs": ["a0", "a1", None], "mode": "extend", "lens": [3, 3, 2], "logprob": [1, 0, 0],
         "new": [2, 1, 3]}], ("numeric-mismatch",)),
    "drain_never_cleared": (_sched_cfg(lora_drain_wait_threshold=1.0),
                            _TWO + [{"op": "step", "reqs": [None, "a0", "a1", "a0", None], "new": [3, 3, 1, 3, 3],
                                     "arrive": [0, 0, 0, 3, 3]}], ("state-violation",)),
    # the radix cache on, every prompt starting with the shared stem: the base request finishes at round 0 and its
    # stem's K/V enters the tree; a0's request (round 1) must not match it (its key ends with a0's lora_id), a0's
    # second (round 2) matches the first a0's; with the key made without the LoRA id a0 reuses the base model's
    "radix_key_without_lora": (_sched_cfg(disable_radix_cache=False),
                               _TWO + [{"op": "step", "reqs": [None, "a0", "a0", "a1"], "mode": "extend",
                                        "lens": [1, 2, 1, 1], "stem": [6, 6, 6, 4], "new": [1, 1, 2, 1],
                                        "arrive": [0, 1, 2, 2]}], ("state-violation",)),
}
# SG1 (docs/findings/sg1-drainer-ignores-pinned-slots.md): a pinned adapter reserves a slot, the base model and a0
# fill the other two of --max-loras-per-batch 3, a1 waits past the 1-round drain threshold; the drainer counts 2
# running adapters < 3 and never drains, so a1 waits for the whole stream of base and a0 requests
SG1_ADAPTERS = {"a0": {"r": 2, "alpha": 2, "modules": ["o_proj"]}, "a1": {"r": 2, "alpha": 4, "modules": ["o_proj"]},
                "p": {"r": 2, "alpha": 8, "modules": ["o_proj"], "pinned": True}}
SG1_CFG = _sched_cfg(slots=3, target_modules=["o_proj"], adapters=SG1_ADAPTERS, max_running_requests=8,
                     lora_drain_wait_threshold=1.0, max_loaded_loras=None)
SG1 = [{"op": "load", "name": "p"}, {"op": "load", "name": "a0"}, {"op": "load", "name": "a1"},
       {"op": "step", "reqs": [None, "a0", "a1"] + [None, "a0"] * 5, "new": [5, 5, 1] + [5] * 10,
        "arrive": [0, 0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10]}]
# SG2 (docs/findings/sg2-drain-budget-recomputed.md): the base model and a0 fill both slots with a request each every
# second round (a prefill round, then a decode round), a1 waits past the 1-round drain threshold and one of them is
# marked draining for it; a draining adapter still admits a request of up to 1.2 x its running requests' remaining
# tokens, recomputed every round, so with 12 tokens a request (1.2 x 10 >= 12 two rounds later) the drain never ends
# while the stream lasts; with 11 (1.2 x 9 < 11) the drain ends within one request's tokens and a1 gets its slot
SG2_CFG = _sched_cfg(target_modules=["o_proj"], adapters={k: SG1_ADAPTERS[k] for k in ("a0", "a1")},
                     max_running_requests=16, lora_drain_wait_threshold=1.0)


def _sg2(new: int, cycles: int = 20) -> list:
    return [{"op": "load", "name": "a0"}, {"op": "load", "name": "a1"},
            {"op": "step", "reqs": [None, "a0", "a1"] + [None, "a0"] * cycles, "new": [new, new, 1] + [new] * 2 * cycles,
             "arrive": [0, 0, 0] + [2 + 2 * (k // 2) for k in range(2 * cycles)]}]


RUN = """
import json, sys
sys.path.insert(0, {root!r})
from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidCase
from fuzzrunner.execute import run_case
from fuzzrunner.target import load_target
target = load_target("sglang_engine")
{prelude}
out = []
for cfg, ops, faults in json.load(sys.stdin):
    if set(faults) & set(target.faults_unavailable):
        out.append(None)  # this release has not the part the fault is planted in
        continue
    try:
        vs = run_case(Case("sglang_engine", cfg, tuple(ops), tuple(faults)), target, device="cpu")
    except InvalidCase:  # the release cannot run it (multi-round requests where the scheduler is not driven)
        out.append(None)
        continue
    out.append([[v.kind, v.tool, v.message[:300], v.kernel, v.location, v.tensor] for v in vs])
print("RESULT " + json.dumps(out))
"""


# input and output logprobs through SGLang's own result processing (results.py): requests asking them from several
# starts (one none: its start is its length), over several rounds, chunked prefill (their input logprobs from two
# chunks), decode batches (each token's output logprob; csgmv's through the decode graph)
SERVED_LOGPROBS = _TWO + [
    {"op": "step", "reqs": ["a0", None, "a1", "a0"], "mode": "extend", "lens": [3, 2, 3, 1], "logprob": [0, 2, 1, 1],
     "new": [3, 1, 2, 2], "arrive": [0, 0, 1, 1]},
    {"op": "step", "reqs": ["a1", "a0"], "mode": "extend", "lens": [3, 2], "logprob": [0, 0], "new": [2, 3]}]
SERVED_LOGPROB_VARIANTS = [_sched_cfg(slots=3, adapters=LP_ADAPTERS, logprob_chunk=2),
                           _sched_cfg("csgmv", slots=3, adapters=LP_ADAPTERS, chunked_prefill_size=2, graph_bs=2)]


@pytest.fixture(scope="module")
def results():
    cases = [[_cfg(b, graph_bs=4 if b == "csgmv" else 0), LIFECYCLE, []] for b in ("triton", "csgmv")]
    cases += [[cfg, ops, [f]] for f, (cfg, ops, _) in FAULT_CASES.items()]
    cases += [[cfg, ops, []] for cfg, ops, _ in FAULT_CASES.values()]
    cases += [[_cfg(b, adapters=PINNED, max_loaded_loras=m, graph_bs=g), FRONTEND_LIFECYCLE, []]
              for b, m, g in (("triton", 2, 0), ("csgmv", 3, 4))] if FRONTEND else []
    cases += [[_lp_cfg(b, chunk), LOGPROBS, []] for b, chunk in LP_VARIANTS]
    cases += [[cfg, SERVED, []] for cfg in SERVED_VARIANTS]
    cases += [[cfg, ops, [f]] for f, (cfg, ops, _) in SERVER_FAULT_CASES.items()]
    cases += [[cfg, ops, []] for cfg, ops, _ in SERVER_FAULT_CASES.values()]
    cases += [[SG1_CFG, SG1, []], [dict(SG1_CFG, adapters=dict(SG1_ADAPTERS, p=dict(SG1_ADAPTERS["p"], pinned=False))),
                                   SG1, []]]
    return run_cases(cases)


def run_cases(cases: list, timeout: int = 900, prelude: str = "", **env: str) -> list:
    """Each ``[config, ops, faults]`` run by ``RUN`` in one subprocess (``env``: variables over this process's;
    ``prelude``: code run there before the cases): per case None (the release cannot run it) or its violations,
    ``[kind, tool, message, kernel, location, tensor]``."""
    r = subprocess.run([sys.executable, "-c", RUN.format(root=str(ROOT), prelude=prelude)], input=json.dumps(cases), text=True,
                       capture_output=True, timeout=timeout, cwd=ROOT, env=dict(os.environ, **env))
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, r.stderr[-3000:]
    return json.loads(line[-1][len("RESULT "):])


@pytest.mark.parametrize("i,backend", [(0, "triton"), (1, "csgmv")])
def test_the_lifecycle_is_silent_on_sglangs_own_code(results, i, backend):
    assert results[i] == [], results[i]


@pytest.mark.parametrize("j,fault", list(enumerate(FAULT_CASES)))
def test_each_planted_fault_is_caught_in_its_minimal_case(results, j, fault):
    kinds = {v[0] for v in results[2 + j]}
    assert kinds & set(FAULT_CASES[fault][2]), results[2 + j]


@pytest.mark.parametrize("j,fault", list(enumerate(FAULT_CASES)))
def test_each_faults_minimal_case_is_silent_without_it(results, j, fault):
    assert results[2 + len(FAULT_CASES) + j] == [], results[2 + len(FAULT_CASES) + j]


@pytest.mark.skipif(not FRONTEND, reason="the tokenizer manager does not import (no frontend-ok stamp)")
@pytest.mark.parametrize("k,backend", [(0, "triton"), (1, "csgmv")])
def test_the_adapter_management_lifecycle_is_silent_on_sglangs_own_code(results, k, backend):
    i = 2 + 2 * len(FAULT_CASES) + k
    assert results[i] == [], results[i]


LP_VARIANTS = [("triton", None), ("csgmv", 0), ("csgmv", 1)]  # SGLang's default chunking, off, one row a pass


@pytest.mark.parametrize("k,variant", list(enumerate(LP_VARIANTS)))
def test_logits_and_input_logprobs_through_sglangs_logits_processor_are_silent(results, k, variant):
    i = 2 + 2 * len(FAULT_CASES) + (2 if FRONTEND else 0) + k
    assert results[i] == [], results[i]


def _served(results, k):
    return results[2 + 2 * len(FAULT_CASES) + (2 if FRONTEND else 0) + len(LP_VARIANTS) + k]


@pytest.mark.parametrize("k", range(len(SERVED_VARIANTS)))
def test_requests_served_by_sglangs_scheduler_are_silent(results, k):
    """Multi-round requests through SGLang's scheduler loop and ForwardBatch.init_new: every batch within the
    slots, the running-request limit and the prefill chunk; no stall; every request done within the bound."""
    if _served(results, k) is None:
        pytest.skip("the scheduler path is not driven on this release (the case is refused: runner._served)")
    assert _served(results, k) == [], _served(results, k)


@pytest.mark.parametrize("j,fault", list(enumerate(SERVER_FAULT_CASES)))
def test_each_scheduler_fault_is_caught_in_its_minimal_case(results, j, fault):
    got = _served(results, len(SERVED_VARIANTS) + j)
    if got is None:
        pytest.skip(f"{fault}: this release's scheduler is not driven (scheduler.py)")
    assert {v[0] for v in got} & set(SERVER_FAULT_CASES[fault][2]), got
    assert not [v for v in got if v[1] == "target"], got  # the fault's violation, and no target error after it


@pytest.mark.parametrize("j,fault", list(enumerate(SERVER_FAULT_CASES)))
def test_each_scheduler_faults_minimal_case_is_silent_without_it(results, j, fault):
    got = _served(results, len(SERVED_VARIANTS) + len(SERVER_FAULT_CASES) + j)
    if got is None:
        pytest.skip(f"{fault}: this release's scheduler is not driven (scheduler.py)")
    assert got == [], got


@pytest.mark.skipif(not FRONTEND, reason="pinned adapters go through the tokenizer manager (no frontend-ok stamp)")
def test_sg1_the_drainer_ignores_the_slots_pinned_adapters_reserve(results):
    """A real SGLang bug (0.5.12 - 0.5.23, docs/findings/sg1-drainer-ignores-pinned-slots.md): with a pinned adapter
    the drain never starts and a1 waits past the drain bound; the same case without the pin is silent."""
    pinned, unpinned = (_served(results, len(SERVED_VARIANTS) + 2 * len(SERVER_FAULT_CASES) + k) for k in (0, 1))
    if pinned is None or (pinned == [] and "0.5.23" not in REASON):
        pytest.skip("the scheduler path is not driven on this release")
    assert any(v[0] == "state-violation" and "drain threshold" in v[2]
               and "no running adapter was marked draining for it" in v[2] for v in pinned), pinned
    assert unpinned == [], unpinned


# counts, per case, the requests whose stored logprobs served_logprobs.Ledger checked (rid, input logprobs stored, their
# start, prompt length) and what the scheduler sent the detokenizer (results.Recorder), as one more row of the case
SEEN = """
import types
from fuzzrunner.targets.sglang_engine import results as _results, served_logprobs as _lp
_seen, _sockets = [], []
_finish, _build, _run_case = _lp.Ledger.finish, _results.build, run_case
def _checked(self, req, start):
    _seen.append([req.rid, len(_lp._lp(req).input_token_logprobs_val or []), start, len(req.origin_input_ids)])
    return _finish(self, req, start)
def _built(sc, mr):
    _build(sc, mr)
    _sockets.append(sc.ipc_channels.send_to_detokenizer)
def run_case(*a, **k):
    _seen.clear(), _sockets.clear()
    vs = _run_case(*a, **k)
    sent = sum(len(s.sent("send_output")) for s in _sockets)
    return list(vs) + [types.SimpleNamespace(kind="SEEN", tool="", message=json.dumps([_seen, sent]), kernel=None,
                                             location=None, tensor=None)]
_lp.Ledger.finish, _results.build = _checked, _built
"""


def test_logprobs_stored_by_sglangs_own_result_processing_are_silent():
    """Steps asking input logprobs are served by SGLang's scheduler (before, they took the tokenizer manager's path
    past it: its result processing, which stores them, was not driven): each request's input logprobs, gathered
    from its prefill chunks, and each generated token's output logprob, eager or from the decode graph, are those of
    its own adapter's float64 reference; the outputs were streamed to the detokenizer's socket (a recorder)."""
    got = run_cases([[cfg, SERVED_LOGPROBS, []] for cfg in SERVED_LOGPROB_VARIANTS], prelude=SEEN)
    for vs in got:
        assert vs is not None and [v for v in vs if v[0] != "SEEN"] == [], vs
        seen, sent = json.loads(vs[-1][2])
        if not seen and "0.5.23" not in REASON:  # driven on every release since the tenth stint (results.py)
            pytest.skip("SGLang's result processing is not driven on this release (results.py)")
        # the 6 requests, each checked when it finished: input logprobs from its start ([None] + one per position
        # but the last; none where the start is its length)
        assert sorted(r for r, *_ in seen) == [f"r{i}" for i in (0, 0, 1, 1, 2, 3)], seen
        assert all(k == n - s for _, k, s, n in seen), seen
        assert sent > 0, sent


@pytest.mark.slow
def test_sg2_a_draining_adapter_admits_requests_as_long_as_they_come():
    """A real SGLang bug (0.5.12 - 0.5.23, docs/findings/sg2-drain-budget-recomputed.md): the adapter marked draining
    for a1 keeps admitting its 12-token requests (within 1.2 x its remaining tokens, recomputed every round), so a1
    waits past the drain bound; with 11-token requests the drain ends and a1 is admitted within it. ~1-2 min."""
    cases = [[SG2_CFG, _sg2(12), []], [SG2_CFG, _sg2(11), []]]
    r = subprocess.run([sys.executable, "-c", RUN.format(root=str(ROOT), prelude="")], input=json.dumps(cases), text=True,
                       capture_output=True, timeout=900, cwd=ROOT)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, r.stderr[-3000:]
    extended, ended = json.loads(line[-1][len("RESULT "):])
    if extended == [] and "0.5.23" not in REASON:
        pytest.skip("the scheduler path is not driven on this release")
    assert any(v[0] == "state-violation" and "was marked draining for it" in v[2] and "admitted 0 more" not in v[2]
               for v in extended), extended
    assert ended == [], ended


def _set_up_releases() -> list[str]:
    site = import_module("fuzzrunner.targets.sglang_lora.site")
    return sorted((p.parent.name for p in site.CACHE.glob("*/engine-ok")),
                  key=lambda v: [int(x) if x.isdigit() else x for x in v.replace(".post", ".").split(".")])


@pytest.mark.slow
@pytest.mark.parametrize("version", _set_up_releases())
def test_every_set_up_release_drives_the_lifecycle_with_only_triaged_findings(version):
    """Each API generation (api.py) drives SGLang's own objects through load, evict, unload, reload and decode
    graph batches; whatever the release's own bugs give is one of the sweep's verdicts (#21380, n-mask), never a
    target error or an untriaged finding. ~1 min per release (one import of its engine)."""
    sweep = import_module("fuzzrunner.targets.sglang_lora.sweep")
    linear = ALL[:4]
    adapters = {n: dict(a, modules=[m for m in a["modules"] if m not in ("embed_tokens", "lm_head")])
                for n, a in ADAPTERS.items()}
    cases = [[_cfg(b, target_modules=linear, adapters=adapters), LIFECYCLE, []] for b in ("triton", "csgmv")]
    cases += [[_cfg(b, graph_bs=4, target_modules=linear, adapters=adapters), LIFECYCLE, []]
              for b in ("triton", "csgmv")]
    r = subprocess.run([sys.executable, "-c", RUN.format(root=str(ROOT), prelude="")], input=json.dumps(cases), text=True,
                       capture_output=True, timeout=1800, cwd=ROOT,
                       env=dict(os.environ, FUZZRUNNER_SGLANG_VERSION=version))
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, r.stderr[-3000:]
    for (cfg, _, _), vs in zip(cases, json.loads(line[-1][len("RESULT "):])):
        for kind, tool, message, kernel, location, tensor in vs:
            f = {"signature": {"tool": tool, "kind": kind, "kernel": kernel, "location": location, "tensor": tensor},
                 "case": {"target": "sglang_engine", "config": cfg}}
            assert sweep.category(f, version) not in ("target", "untriaged"), (version, cfg["backend"], message)


def _cli(*args, timeout=3600):
    # from scratch: without the seeds (the known bugs' minimal cases, G1, G2, G3 and SG1 of 0.5.23 among them)
    return subprocess.run([sys.executable, "-m", "fuzzrunner", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), FUZZRUNNER_SGLANG_SEEDS="0"), timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(SERVER_FAULT_CASES))
def test_each_scheduler_fault_is_found_from_scratch_within_300_examples(tmp_path, fault):
    """From scratch: a fresh corpus, the seeds left out (``_cli``; docs/sglang.md's table has the counts)."""
    r = _cli("fuzz", "--target", "sglang_engine", "--fault", fault, "--max-examples", "300", "--seed", "0",
             "--budget", "3000", "--corpus", str(tmp_path / "c"), "--report", str(tmp_path / "r.json"))
    if "not driven here" in r.stdout + r.stderr:
        pytest.skip(f"{fault}: this release's scheduler is not driven (scheduler.py)")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    [run] = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert run["replayed"] == [] and run["findings"], run["replayed"]


@pytest.mark.slow
def test_faults_shows_none_of_sglangs_own_import_warnings():
    """`fuzzrunner faults --target sglang_engine` printed SGLang's import-time UserWarnings on a machine without CUDA
    ("Only CUDA, HIP and XPU support AWQ currently.", GGUF's, "Triton is not supported on current platform"), as
    did every campaign and exported repro (a new user's trial): the target's load hides them
    (tests/unit/test_sglang_import_warnings.py: only those, only SGLang's, only while it loads)."""
    r = subprocess.run([sys.executable, "-m", "fuzzrunner", "faults", "--target", "sglang_engine"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0 and "planted faults of target sglang_engine" in r.stdout, r.stderr[-3000:]
    assert "Warning" not in r.stderr, r.stderr[-3000:]
