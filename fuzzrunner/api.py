"""The public API behind ``fuzzrunner``'s front door: fuzz a target, replay a case."""

from __future__ import annotations

import os
from collections.abc import Iterable

from . import env_defaults
from .arguments import kind_of, several
from .callbacks import function_kind
from .case import Case
from .context import Context
from .corpus import load_any
from .engine.campaign import run_campaign
from .engine.result import CampaignResult
from .errors import InvalidArgument
from .execute import run_case
from .settings import Settings
from .settings import profile as _profile
from .target import Target, load_target, spec_of
from .violation import Violation


def fuzz(target: str | Target = "reference_runner", *, settings: Settings | None = None, faults: Iterable[str] = (),
         profile: str | None = None, corpus: str | os.PathLike | None = None, database=None, on_event=None,
         ray: str | None = None, db: str | None = None, started: float | None = None, context: Context | None = None,
         **overrides) -> CampaignResult:
    """Run a campaign under ``settings`` (default: the ``profile``'s, ``dev`` if none is named);
    ``overrides`` are ``Settings`` fields on top (max_examples=, budget_s=, seed=, ...). The campaign ends
    ``budget_s`` after ``started`` (``time.time()``; default: this call), start-up and CPU triage included.

    ``context``: the run's context, resolved already for these settings (``env_defaults.resolved``: the CLI
    resolves it once, before anything starts, to refuse a device that cannot be had); default: resolved here.

    ``ray="local"|"auto"|"ray://host:port"`` runs its ``workers`` shards as Ray actors, sharing the
    example database at ``db="redis://..."`` or, without it, the one the driver serves.

    ``on_event(event)`` gets each event, a frozen dataclass of ``fuzzrunner.engine.events``:
    ``ProgressEvent``, ``WarningEvent``, ``FindingEvent``, ``RegressionEvent`` (``event.kind`` names it; read its
    attributes: ``event.message``, ``event.finding``). Reading one as the dict events used to be
    (``event["type"]``, ``event.get("message")``) still works for one release, with a ``DeprecationWarning``.
    An exception the callback raises is said once in the result's warnings and the campaign goes on."""
    _check_fuzz_arguments(target, corpus, on_event, profile, ray, db)
    spec = target if isinstance(target, str) else spec_of(target)
    if settings is not None and not isinstance(settings, Settings):
        raise InvalidArgument(f"fuzz(settings=...) takes a fuzzrunner.Settings, not {type(settings).__name__}: "
                              f"Settings(**fields), or pass the fields as keywords.")
    if settings is not None and profile is not None:
        raise InvalidArgument(f"fuzz(settings=..., profile={profile!r}): pass one of the two (a profile is a "
                              f"ready-made Settings: fuzzrunner.settings.profile(name)).")
    # the environment's defaults (env_defaults: the shadow mode) for what the settings leave open; a bad value is
    # refused here, not in every worker
    settings = env_defaults.apply((settings or _profile(profile or "dev")).override(**overrides))
    return run_campaign(spec, settings, faults=several(faults, "faults"), corpus_dir=corpus, database=database,
                        on_event=on_event, ray=ray, db=db, started=started, context=context)


def replay(case: Case | str | os.PathLike, *, target: str | Target | None = None,
           oracles: Iterable[str] | None = None, device: str | None = None, isolated: bool = False,
           sanitizer: str = "none", case_timeout: float | None = None) -> list[Violation]:
    """Run one case (or a case/finding file) under the oracles; return its violations.

    In this process by default; ``isolated=True`` runs it in a crash-isolated worker (a segfault
    or a lost CUDA context comes back as a crash violation), under compute-sanitizer when
    ``sanitizer`` names a tool; there a case running past ``case_timeout`` seconds is a timeout
    (default: the timeout a finding file was found under, else the settings' default).
    ``target`` defaults to the spec a finding file recorded, else the case's target name. The run's context
    is resolved as a campaign's is (``device``, else this process's; the shadow mode the environment's default,
    else the device's: ``env_defaults``): ``device="cpu"`` checks the CPU's memory, in this process too.
    """
    _check_replay_arguments(case, target, device, isolated, sanitizer)
    oracles = several(oracles, "oracles") if oracles is not None else None
    settings = env_defaults.apply(Settings(device=device, sanitizer=sanitizer, oracles=oracles))
    finding = None
    if not isinstance(case, Case):
        case, finding = load_any(case)
    if target is None:
        from .engine.replay import recorded_target
        target = recorded_target(case, finding)
    if isolated or sanitizer != "none":
        from .engine.replay import Replayer
        spec = target if isinstance(target, str) else spec_of(target)
        timeout = case_timeout if case_timeout is not None else finding.case_timeout_s if finding else None
        settings = settings.override(case_timeout_s=timeout) if timeout is not None else settings
        with Replayer(settings) as replayer:
            return replayer.run(case, spec)
    t = target if isinstance(target, Target) else load_target(target)
    t.check_faults(case.faults)
    t.check_case(case)
    return run_case(case, t, context=Context.resolve(settings, in_process=True), oracles=settings.oracles)


_TARGET = "a built-in target's name, a 'FILE.py:OBJ' or 'package.module:OBJ' spec, or a fuzzrunner.Target"
_PATH = "a path (str or os.PathLike)"


def _check_fuzz_arguments(target, corpus, on_event, profile, ray, db) -> None:
    """Each argument of ``fuzz`` of the right type, else one line (``fuzz(123)`` was an AttributeError)."""
    kind_of(target, (str, Target), "fuzz(target)", f"pass {_TARGET}")
    kind_of(corpus, (str, os.PathLike, type(None)), "fuzz(corpus)", f"pass {_PATH}, or None for no corpus")
    if on_event is not None and not callable(on_event):
        kind_of(on_event, (), "fuzz(on_event)", "pass a function of one event, or None")
    if on_event is not None and function_kind(on_event):  # called, never awaited or iterated: it would see nothing
        raise InvalidArgument(f"fuzz(on_event) is {function_kind(on_event)}: it would see no event (it is called, "
                              f"never awaited); pass a plain function of one event.")
    for name, value in (("profile", profile), ("ray", ray), ("db", db)):
        kind_of(value, (str, type(None)), f"fuzz({name})", "pass a string, or None")


def _check_replay_arguments(case, target, device, isolated, sanitizer) -> None:
    kind_of(case, (Case, str, os.PathLike), "replay(case)", f"pass a fuzzrunner.Case or {_PATH} of a case or "
                                                            f"finding file")
    kind_of(target, (str, Target, type(None)), "replay(target)", f"pass {_TARGET}, or None for the one recorded")
    kind_of(device, (str, type(None)), "replay(device)", "pass 'cpu', 'cuda', or None for the one present")
    kind_of(isolated, (bool,), "replay(isolated)", "pass True or False")
    kind_of(sanitizer, (str,), "replay(sanitizer)", "pass a sanitizer tool's name, or 'none'")
