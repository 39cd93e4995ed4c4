"""Never cry wolf: every oracle stays silent on correct code over generated cases."""

import os

import pytest
from hypothesis import HealthCheck, given, settings

from fuzzrunner.execute import run_case
from fuzzrunner.target import load_target

ALL = ["shadow", "invariants", "numeric", "poison"]
N_FAST = int(os.environ.get("FUZZRUNNER_SILENCE_EXAMPLES", "25"))
N_SLOW = int(os.environ.get("FUZZRUNNER_SILENCE_SLOW_EXAMPLES", "2000"))


def _silent(target_name, n, oracles):
    target = load_target(target_name)
    seen = []

    @settings(max_examples=n, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(target.cases(()))
    def check(case):
        seen.append(1)
        vs = run_case(case, target, oracles=oracles)
        assert vs == [], "\n".join(f"{v.signature.short()}: {v.message}" for v in vs) + "\n" + case.to_json()

    check()
    return len(seen)


@pytest.mark.parametrize("target", ["reference_runner", "lora_kernels"])
def test_all_oracles_silent_on_correct_code(target):
    assert _silent(target, N_FAST, ALL) == N_FAST


@pytest.mark.slow
@pytest.mark.parametrize("target", ["reference_runner", "lora_kernels"])
def test_all_oracles_silent_on_many_generated_cases(target):
    """Run with -m slow; FUZZRUNNER_SILENCE_SLOW_EXAMPLES sets the count (default 2000)."""
    assert _silent(target, N_SLOW, ALL) == N_SLOW
