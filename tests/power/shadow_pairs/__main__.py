"""Scoreboard: PYTHONPATH=.:tests/power python -m shadow_pairs [-v]"""

import collections
import sys

from fuzzrunner import _env

_env.configure()

from shadow_pairs import PAIRS, verdict  # noqa: E402

verbose = "-v" in sys.argv
by_cause = collections.defaultdict(collections.Counter)
for p in PAIRS:
    v, why = verdict(p)
    by_cause[p.cause][v] += 1
    if verbose and v != "exact":
        print(f"{v:7} {p.name}: {why.strip().splitlines()[-1] if why else ''}")
cols = ("exact", "missed", "wrong", "noisy", "crash")
print(f"{'cause':22} {'pairs':>5} " + " ".join(f"{c:>6}" for c in cols))
total = collections.Counter()
for cause, c in sorted(by_cause.items()):
    total.update(c)
    print(f"{cause:22} {sum(c.values()):5} " + " ".join(f"{c[k]:6}" for k in cols))
print(f"{'all':22} {sum(total.values()):5} " + " ".join(f"{total[k]:6}" for k in cols))
