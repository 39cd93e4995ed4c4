"""The shadow oracle on programs it did not write: each buggy/fixed pair of shadow_pairs/
gets the exact report (kind, tensor, file:line) on the buggy one and silence on the fixed one.
Scoreboard: PYTHONPATH=.:tests/power .venv/bin/python -m shadow_pairs -v"""

import pytest
from shadow_pairs import PAIRS, verdict


@pytest.mark.parametrize("p", PAIRS, ids=lambda p: f"{p.cause}-{p.name}")
def test_pair_is_caught_exactly_and_its_fix_is_silent(p):
    v, why = verdict(p)
    assert v == "exact", f"{p.name}: {v}\n{why}"


def test_the_suite_covers_every_cause_with_sixty_pairs_or_more():
    assert len(PAIRS) >= 60
    assert len({p.name for p in PAIRS}) == len(PAIRS)
