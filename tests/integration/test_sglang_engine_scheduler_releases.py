"""SGLang's own scheduler loop on each release shape before 0.5.20 (``targets/sglang_engine/scheduler_release.py``):
one release per shape, each in its own subprocess (~1-2 min: one import of its engine). On each, the served
requests are silent of the scheduler checks, each planted scheduler fault is caught in its minimal case (and its case
is silent without it), and SG1's directed case is found (0.5.12+ by source). SGLang's own result processing runs on each (results.py:
the scheduler's output-processor mixin before 0.5.13, the load inquirer 0.5.13 reads), so the logprob-cursor fault is
caught on each shape too (before the tenth stint it was unavailable on 0.5.5 - 0.5.13). Before the shapes were adapted each of
these releases was refused ("the scheduler path is not driven on SGLang X"), so the cases were invalid there.

The shapes: 0.5.11 (the LoRA check inline in the loop, no drainer: the drain fault is unavailable and the drain
cases refused there), 0.5.12 (no ``FutureMap`` relay: ``batch.output_ids`` and a ``ModelWorkerBatch``; list token ids;
``check_finished``; the drainer made in ``__init__``), 0.5.13 (no runtime context, ``get_next_batch_to_run()`` without arguments, no
``_relay_forward_payload``), 0.5.14 (a runtime context without ``get_server_args``), 0.5.16 (the published
``ServerArgs`` refuses a bare write; the plan-returning loop; the two-argument relay), 0.5.17 (config bags), 0.5.19
(the three-argument relay; the timeouts' last release). Before 0.5.10 (eighth stint): 0.5.5 (no set-up methods: the
lines of ``Scheduler.__init__``; the loop inline in ``get_new_batch_prefill`` asking the worker's
``can_run_lora_batch``; no ``CacheInitParams``, no ``release_kv_cache``), 0.5.7 (the set-up methods, the loop still
inline, ``log_prefill_stats_late``), 0.5.8 (``_get_new_batch_prefill_raw`` asking the worker, the queued timeout),
0.5.9 (the manager's check, ``TimeStats`` without a setter). These run their cases on ``csgmv`` with LoRA on the
linear layers only: their ``triton`` backend has the n-mask bug (``sgemm_lora_b``, fixed in 0.5.10) and their
embedding / lm_head LoRA emb-unzeroed, csgmv-embedding and #18649 (0.5.6.post2 - 0.5.9), known bugs the served
requests would meet; and no drainer (0.5.12+).
"""

from importlib import import_module

import pytest
import test_sglang_engine as T  # the cases and the subprocess runner of the pinned release's test

SHAPES = ["0.5.5", "0.5.7", "0.5.8", "0.5.9", "0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.16", "0.5.17", "0.5.19"]
NO_DRAINER = {"0.5.5", "0.5.7", "0.5.8", "0.5.9", "0.5.11"}  # the drain cases are refused (no LoRADrainer before 0.5.12)
BEFORE_0_5_10 = {"0.5.5", "0.5.7", "0.5.8", "0.5.9"}  # csgmv, linear layers only (module doc)
LINEAR = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
site = import_module("fuzzrunner.targets.sglang_lora.site")


def _set_up(version: str) -> bool:
    return (site.CACHE / version / "engine-ok").exists() and (site.CACHE / version / "frontend-ok").exists()


def _linear_csgmv(cfg: dict) -> dict:
    """``cfg`` on the csgmv backend with LoRA on the linear layers only (the releases before 0.5.10: module doc)."""
    adapters = {k: dict(a, modules=[m for m in a["modules"] if m not in ("embed_tokens", "lm_head")])
                for k, a in cfg["adapters"].items()}
    return dict(cfg, backend="csgmv", target_modules=[m for m in cfg["target_modules"] if m in LINEAR],
                adapters=adapters)


@pytest.mark.slow
@pytest.mark.parametrize("version", SHAPES)
def test_sglangs_scheduler_runs_on_each_release_shape(version):
    if not _set_up(version):
        pytest.skip(f"SGLang {version} is not set up (scripts/sglang_setup.sh {version})")
    fit = _linear_csgmv if version in BEFORE_0_5_10 else (lambda cfg: cfg)
    cases = [[fit(T.SERVED_VARIANTS[0]), T.SERVED, []]]
    cases += [[fit(cfg), ops, [f]] for f, (cfg, ops, _) in T.SERVER_FAULT_CASES.items()]
    cases += [[fit(cfg), ops, []] for cfg, ops, _ in T.SERVER_FAULT_CASES.values()]
    cases += [[fit(T.SG1_CFG), T.SG1, []]]
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
