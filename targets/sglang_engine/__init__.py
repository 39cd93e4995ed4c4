"""Target ``sglang_engine``: SGLang's own LoRA state machine, driven on a tiny model of SGLang's layer classes.

``LoRAManager``, ``LoRAMemoryPool``, the LoRA layer wrappers, adapter load/unload through ``LoRARef``; where the
release's tokenizer manager and scheduler import, through them (``DRIVES`` says it in a line: ``fuzzrunner
targets``).

Needs an SGLang release set up with its engine's imports (``scripts/sglang_setup.sh VERSION``: the stamp
``engine-ok``). Every 0.5.x release from 0.5.5 is driven, per API generation (api.py).
See docs/sglang.md ("sglang_engine").
"""

from __future__ import annotations

import functools
import json
import os
import tempfile

from fuzzrunner.errors import HarnessError, TargetUnavailable

from ..sglang_lora import INSTALL_HINT, site

_ENGINE: dict = {}

# what of SGLang this target drives, as `fuzzrunner targets` says it (catalog.py reads it without importing this)
DRIVES = ("LoRAManager, LoRAMemoryPool and the LoRA layer wrappers, MoE experts (FusedMoEWithLoRA) included",
          "adapter load/unload through the tokenizer manager's API",
          "SGLang's scheduler path (get_next_batch_to_run, PrefillAdder, can_schedule_lora_req, LoRADrainer, "
          "ForwardBatch.init_new) where the release's scheduler imports, else the direct path to the manager",
          "its tree cache: the release's radix cache (RadixCache / UnifiedRadixCache) where a case draws it on",
          "its result processing (process_batch_result, SGLang's Sampler) on 0.5.5 - 0.5.23",
          "the LogitsProcessor's lm_head passes and the decode CUDA graph's batch info")


def engine_available() -> tuple[bool, str]:
    """Cheap (no import of SGLang): whether a tree with the engine's imports is there, else why."""
    paths = site.candidate_paths()
    v = site.wanted_version()
    if paths is None:
        return False, f"SGLang is not set up (no tree .cache/sglang/{v}/); {INSTALL_HINT.format(v=v)}."
    if not os.environ.get("FUZZRUNNER_SGLANG_SITE") and not (paths[0].parent / "engine-ok").exists():
        return False, (f"SGLang {v}'s engine imports are not set up (no {paths[0].parent / 'engine-ok'}); "
                       f"run scripts/sglang_setup.sh {v} again.")
    return True, str(paths[0])


def load_engine(device: str | None = None):
    """The release's engine, imported once per process and the same for every device; with ``device`` (a case's,
    from its run context) also fitted to it (``boot.adapt``: the CPU adaptations), once."""
    from . import boot
    eng = _ENGINE.get("engine")
    if eng is None or (device is not None and device not in eng.adapted):
        with site.quiet_imports():  # SGLang's own import-time warnings (no CUDA here): nothing a user can act on
            eng = eng or _import_engine()
            if device is not None and device not in eng.adapted:
                boot.adapt(device)
                eng.adapted.add(device)
    return eng


def _import_engine():
    ok, why = engine_available()
    if not ok:
        raise TargetUnavailable(why)
    from . import boot, frontend, model
    try:
        eng = boot.load()
        eng.adapted = set()
        eng.frontend, eng.frontend_why = (frontend.load() if (eng.tree.parent / "frontend-ok").exists()
                                          or os.environ.get("FUZZRUNNER_SGLANG_SITE") else (None, "no frontend-ok"))
        from . import batch, scheduler
        eng.logits_processor, eng.logits_processor_why = batch.available()
        eng.scheduler, eng.scheduler_why = scheduler.load()
        eng.model_dir = tempfile.mkdtemp(prefix="sglang_engine-model-")
        with open(os.path.join(eng.model_dir, "config.json"), "w") as f:
            json.dump(model.hf_config_dict(), f)
        from transformers import LlamaConfig
        eng.hf_config = LlamaConfig.from_pretrained(eng.model_dir)
    except HarnessError:
        raise
    except Exception as e:
        raise TargetUnavailable(f"SGLang's engine failed to import ({type(e).__name__}: "
                                f"{str(e).splitlines()[0][:200] if str(e) else ''}); "
                                f"{INSTALL_HINT.format(v=site.wanted_version())}.") from None
    _ENGINE["engine"] = eng
    return eng


def _run(case, ctx, **_):
    from . import runner
    return runner.run(case, ctx, load_engine(ctx.device))


BACKENDS_ENV = "FUZZRUNNER_SGLANG_BACKENDS"


def drawn_backends(shipped) -> tuple:
    """The ``--lora-backend`` values cases draw: the release's drivable ones, or those ``FUZZRUNNER_SGLANG_BACKENDS``
    (comma-separated) names of them (a campaign of one backend: the sweep, a backend's clean campaign)."""
    shipped = tuple(shipped)
    asked = [b.strip() for b in os.environ.get(BACKENDS_ENV, "").split(",") if b.strip()]
    unknown = [b for b in asked if b not in shipped]
    if unknown:
        raise HarnessError(f"{BACKENDS_ENV}={os.environ[BACKENDS_ENV]!r}: {', '.join(unknown)} is not a backend this "
                           f"SGLang drives here; name some of {', '.join(shipped)}, or unset it for all.")
    return tuple(asked) or shipped


def seed_left_out(case, drawn: tuple) -> str | None:
    """Why a campaign drawing only the backends ``drawn`` (``FUZZRUNNER_SGLANG_BACKENDS``) leaves seed ``case`` out:
    its backend is not one of them (a seed is a case like a drawn one: the docs' "cases draw only these")."""
    backend = case.config.get("backend") if isinstance(case.config, dict) else None
    if backend in drawn:
        return None
    return f"their backend is not one {BACKENDS_ENV}={os.environ.get(BACKENDS_ENV, '')!r} draws"


def make_target():
    from fuzzrunner.target import Target

    from . import cases, faults, frontend, known, scheduler, scheduler_faults
    from . import moe as sparse
    eng = load_engine()  # the same for every device: a case's run fits it to its own (ctx.device)
    drawn = drawn_backends(eng.api.backends)
    moe_why = sparse.unavailable()
    results = eng.scheduler is not None and eng.scheduler.results  # its result processing driven (results.py)
    return Target(
        name="sglang_engine",
        description=f"SGLang {eng.version}'s LoRAManager, LoRAMemoryPool and LoRA layers (qkv, o, gate_up, down, "
                    f"embedding, lm_head{', MoE experts' if moe_why is None else ''}) with real PEFT adapters on the "
                    f"backends {', '.join(eng.api.backends)}: load, "
                    f"unload, reload, eviction, prepare, forward; "
                    f"the adapter-management API, the scheduler's admission, the decode graph's capture",
        cases=functools.partial(cases.sglang_engine_cases, modules=eng.api.modules, frontend=eng.frontend is not None,
                                logprobs=eng.logits_processor, backends=drawn,
                                scheduler=eng.scheduler is not None,
                                drainer=eng.scheduler is not None and eng.scheduler.drainer, moe=moe_why is None,
                                radix=eng.scheduler is not None and eng.scheduler.radix_cache is not None,
                                results=results),
        run=_run,
        # the known bugs' minimal cases (docs/sglang.md, the sweep's triage), replayed first: a deterministic verdict
        # per release; FUZZRUNNER_SGLANG_SEEDS=0 leaves them out (a planted fault found from scratch)
        seeds=None if os.environ.get("FUZZRUNNER_SGLANG_SEEDS") == "0" else
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds"),
        skip_seed=functools.partial(seed_left_out, drawn=drawn) if os.environ.get(BACKENDS_ENV, "").strip() else None,
        faults=tuple(faults.FAULTS),
        fault_descriptions=dict(faults.FAULTS),
        faults_unavailable=faults.unavailable(eng.api, eng.frontend, eng.logits_processor, eng.scheduler is not None,
                                              drawn) | scheduler_faults.unavailable(eng.scheduler, eng.api.version),
        # each step's path (scheduler, tokenizer manager, direct) as this loaded release takes it (cases.step_path)
        features=functools.partial(cases.features, scheduler=eng.scheduler is not None,
                                   frontend=eng.frontend is not None, results=results),
        summary_features=("path",),  # the summary's "path: scheduler in N, ..." line: which path ran
        feature_space=cases.feature_space(eng.api.modules, eng.frontend is not None, eng.logits_processor,
                                          drawn, eng.scheduler is not None,
                                          eng.scheduler is not None and eng.scheduler.drainer, moe_why is None,
                                          eng.scheduler is not None and eng.scheduler.radix_cache is not None,
                                          results),
        details=(f"sglang engine {eng.version} (from {eng.tree})", *eng.api.found(),
                 "MoE LoRA: " + ("FusedMoEWithLoRA over Mixtral's sparse block (CPU cases; moe.py)" if moe_why is None
                                 else f"not driven ({moe_why})"),
                 "logits: " + ("SGLang's LogitsProcessor (last token per request, input-logprob passes)"
                               if eng.logits_processor else
                               f"lm_head called by the target ({eng.logits_processor_why})"),
                 "scheduler: " + (scheduler.describe(eng.scheduler) if eng.scheduler
                                  else f"admission loop re-stated ({eng.scheduler_why})"),
                 *(frontend.describe(eng.frontend) or [f"adapter management: not driven ({eng.frontend_why}): "
                                                       f"load / unload / requests go to the LoRAManager directly"])),
        own_code=(os.path.dirname(os.path.abspath(__file__)),),
        known_bugs=functools.partial(known.label, version=eng.version),  # G1, G2, G3, SG1, SG2, ... (known.py)
        code_under_test={"engine": "sglang", "release": eng.version, "tree": str(eng.tree)},
    )


TARGET = make_target
