"""``sglang_engine``: a request's own ``extra_key`` in SGLang's radix cache (keys.py) and retraction under KV
pressure (retraction.py), each oracle both ways: silent on SGLang's own code, its planted fault caught in its minimal
case, and SGLang #24638 (a base-model request whose key is an adapter's lora_id reuses that adapter's K/V) caught on
a release that has it (every 0.5.x, by source) and labelled."""

import pytest
from test_sglang_engine import AVAILABLE, REASON, _sched_cfg, run_cases

pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"sglang_engine: {REASON}")

_TWO = [{"op": "load", "name": "a0"}, {"op": "load", "name": "a1"}]
# every prompt starts with the whole stem: a0 without a key (round 0), the base model under the shared key "u"
# twice (rounds 1, 2: the second reuses the first's), a0 under "u" (round 2: must not reuse a0's keyless K/V), a0
# without a key again (round 3: reuses round 0's)
KEYS = _TWO + [{"op": "step", "reqs": ["a0", None, None, "a0", "a0"], "mode": "extend", "lens": [1, 1, 1, 1, 1],
                "stem": [6, 6, 6, 6, 6], "new": [1, 1, 1, 1, 1], "arrive": [0, 1, 2, 2, 3],
                "key": [None, "u", "u", "u", None]}]
# #24638: a0's request (round 0), then a base-model request whose key is a0's lora_id (round 1)
KEY_24638 = _TWO + [{"op": "step", "reqs": ["a0", None], "mode": "extend", "lens": [1, 1], "stem": [6, 6],
                     "new": [1, 1], "arrive": [0, 1], "key": [None, "lora:a0"]}]
# three requests of 8 new tokens in a pool of 40 with SGLang's retraction test mode every 2nd forward: requests are
# retracted (their KV released, requeued) and re-prefilled, over and over, and end with their own adapter's tokens
RETRACT = _TWO + [{"op": "step", "reqs": ["a0", "a1", None], "mode": "extend", "lens": [3, 3, 3], "new": [8, 8, 8]}]
RADIX = _sched_cfg(slots=3, disable_radix_cache=False)
SMALL = _sched_cfg(slots=3, max_total_tokens=40, retract_interval=2)
CASES = [[RADIX, KEYS, []], [RADIX, KEYS, ["radix_key_without_extra_key"]], [RADIX, KEY_24638, []],
         [SMALL, RETRACT, []], [SMALL, RETRACT, ["retract_keeps_kv"]],
         [dict(SMALL, disable_radix_cache=False), RETRACT, []]]


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES, timeout=1800)  # six cases, ~3 min on an idle 2-core machine


def test_requests_under_their_own_keys_reuse_only_their_own_adapters_and_keys_kv(results):
    assert results[0] == [], results[0]


def test_a_radix_key_without_the_users_key_is_caught(results):
    [v] = results[1]
    assert v[0] == "state-violation" and "under another extra_key" in v[2], v


def test_24638_a_base_request_keyed_by_an_adapters_lora_id_reuses_its_kv(results):
    [v] = results[2]
    assert v[0] == "state-violation" and "step.prefix-cache" in v[2] and "of another adapter" in v[2], v


def test_retracted_requests_end_with_their_own_adapters_tokens_and_the_pool_whole(results):
    assert results[3] == [] and results[5] == [], results[3:]


def test_a_retraction_that_frees_no_kv_is_caught(results):
    [v] = results[4]
    assert v[0] == "state-violation" and "step.kv-pool" in v[2] and "leaked" in v[2], v
