"""SGLang's own scheduler loop on each release shape before 0.5.20 (``targets/sglang_engine/scheduler_release.py``):
one release per shape, each in its own subprocess (~1-2 min: one import of its engine). On each, the served
requests are silent of the scheduler checks, each planted scheduler fault is caught in its minimal case (and its case
is silent without it), and SG1's directed case is found (0.5.12+ by source). Before the shapes were adapted each of
these releases was refused ("the scheduler path is not driven on SGLang X"), so the cases were invalid there.

The shapes: 0.5.11 (the LoRA check inline in the loop, no drainer: the drain fault is unavailable and the drain
cases refused there), 0.5.12 (no ``FutureMap`` relay: ``batch.output_ids`` and a ``ModelWorkerBatch``; list token ids;
``check_finished``; the drainer made in ``__init__``), 0.5.13 (no runtime context, ``get_next_batch_to_run()`` without arguments, no
``_relay_forward_payload``), 0.5.14 (a runtime context without ``get_server_args``), 0.5.16 (the published
``ServerArgs`` refuses a bare write; the plan-returning loop; the two-argument relay), 0.5.17 (config bags), 0.5.19
(the three-argument relay; the timeouts' last release).
"""

from importlib import import_module

import pytest
import test_sglang_engine as T  # the cases and the subprocess runner of the pinned release's test

SHAPES = ["0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.16", "0.5.17", "0.5.19"]
NO_DRAINER = {"0.5.11"}  # the drain cases are refused there (no LoRADrainer before 0.5.12)
site = import_module("fuzzrunner.targets.sglang_lora.site")


def _set_up(version: str) -> bool:
    return (site.CACHE / version / "engine-ok").exists() and (site.CACHE / version / "frontend-ok").exists()


@pytest.mark.slow
@pytest.mark.parametrize("version", SHAPES)
def test_sglangs_scheduler_runs_on_each_release_shape(version):
    if not _set_up(version):
        pytest.skip(f"SGLang {version} is not set up (scripts/sglang_setup.sh {version})")
    cases = [[T.SERVED_VARIANTS[0], T.SERVED, []]]
    cases += [[cfg, ops, [f]] for f, (cfg, ops, _) in T.SERVER_FAULT_CASES.items()]
    cases += [[cfg, ops, []] for cfg, ops, _ in T.SERVER_FAULT_CASES.values()]
    cases += [[T.SG1_CFG, T.SG1, []]]
    served, *rest = T.run_cases(cases, timeout=1800, FUZZRUNNER_SGLANG_VERSION=version)
    n = len(T.SERVER_FAULT_CASES)
    faulty, clean, (sg1,) = rest[:n], rest[n:2 * n], rest[2 * n:]
    assert served == [], (version, served)  # None: the case was refused (the scheduler path not driven)
    for (fault, (_, _, kinds)), got, without in zip(T.SERVER_FAULT_CASES.items(), faulty, clean):
        if version in NO_DRAINER and fault == "drain_never_cleared":
            assert got is None and without is None, (version, got, without)  # unavailable / refused
            continue
        # init_new_fetches_one: a KeyError in prepare_lora_batch on 0.5.20+ (the minimal case's "crash"); before,
        # the pool check's "not resident after prepare_lora_batch" (with the logits it breaks)
        kinds = ("crash", "state-violation") if fault == "init_new_fetches_one" else kinds
        assert got and {v[0] for v in got} & set(kinds), (version, fault, got)
        assert not [v for v in got if v[1] == "target"], (version, fault, got)
        assert without == [], (version, fault, without)
    if version in NO_DRAINER:
        assert sg1 is None, sg1  # SG1 needs the drainer: outside its range
        return
    assert sg1 and any(v[0] == "state-violation" and "no running adapter was marked draining for it" in v[2]
                       for v in sg1), (version, sg1)
