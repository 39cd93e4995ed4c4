"""The pytest plugin's run time: a fuzz test's campaign and report, corpus replays.

``fuzzrunner.pytest_plugin`` imports this only when a fuzz test or a corpus item runs;
everything heavy (torch, Triton, Hypothesis, the engine) is imported from here.
A fuzz test gets a ``FuzzCampaign``; a failing one prints each finding's signature,
violation, minimal case (JSON) and a line to reproduce it with.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from . import names
from .corpus import atomic_write, load_any, safe_name
from .coverage import PYTEST_PROPERTY
from .engine.result import StopReason, stop_text
from .errors import HarnessError, InvalidArgument, InvalidCase, UnsupportedCase
from .finding import Finding, case_text, known_text, render
from .target_spec import TargetSpec
from .text import plural


class CorpusRegression(Exception):
    """A saved finding or case shows a violation again; the message is the whole report."""


class FuzzCampaign:
    """What a fuzz test gets: the campaign's result, and assertions over its findings."""

    def __init__(self, result, target_spec: str, profile: str, repro_dir: Path, here: Path):
        self.result, self.target_spec, self.profile = result, target_spec, profile
        self.repro_dir, self._here = repro_dir, here
        self.checked = False  # the test looked at the findings (else the plugin asserts none)

    @property
    def findings(self) -> list[Finding]:
        self.checked = True
        return list(self.result.findings)

    def assert_no_findings(self) -> None:
        self.checked = True
        if self.result.findings:
            pytest.fail(self.report(), pytrace=False)

    def assert_finds(self, kind: str | None = None, *, tensor: str | None = None) -> Finding:
        """The first finding of ``kind`` (e.g. "uninitialized-read") on ``tensor``; fail if none."""
        self.checked = True
        wanted = [f for f in self.result.findings if kind in (None, f.signature.kind)
                  and tensor in (None, f.signature.tensor)]
        if not wanted:
            what = " on ".join(x for x in (kind or "any finding", tensor) if x)
            seen = "; ".join(f.signature.short() for f in self.result.findings) or "nothing"
            pytest.fail(f"fuzzrunner expected {what} in target {self.result.target!r} after "
                        f"{plural(self.result.examples, 'case')} (seed {self.result.seed}); it found {seen}. "
                        f"Raise max_examples or budget_s if the bug needs a longer search.", pytrace=False)
        return wanted[0]

    def report(self) -> str:
        r = self.result
        n = len(r.findings)
        lines = [f"fuzzrunner found {plural(n, 'bug')} in target {r.target!r} ({plural(r.examples, 'case')} in "
                 f"{r.duration_s:.1f} s, seed {r.seed}, profile {self.profile!r}, "
                 f"stopped: {stop_text(r.stop_reason)}):"]
        for i, f in enumerate(sorted(r.findings, key=lambda f: f.first_found_after_examples), 1):
            lines += ["", f"{i}. " + render(f, indent="   ", with_case=True)]
            lines += ["   " + line for line in self._export(f)]
        return "\n".join(lines)

    def _export(self, f: Finding) -> list[str]:
        base = self.repro_dir / safe_name(f.case.target)
        script, note = None, None
        try:
            from .repro import save_repro
            from .target import BUILTIN
        except ImportError as e:
            note = f"repro script not written: fuzzrunner.repro is unavailable ({e})"
        else:
            own = {} if self.target_spec in BUILTIN else {"target": self.target_spec}
            try:
                script = Path(save_repro(f, base / f"{f.id}.py", **own))
                f.repro = str(script)
            except Exception as e:  # the report must still come out
                note = f"repro script not written: {type(e).__name__}: {e}"
        path = base / f"{f.id}.json"
        try:
            atomic_write(path, json.dumps(f.to_dict(), indent=2))
        except OSError as e:
            return [x for x in (note, f"finding not written to {path}: {e.strerror}; use --fuzzrunner-repro-dir DIR")
                    if x]
        out = [f"finding: {self._show(path)}"]
        out.append(f"repro:   {self._show(script)}" if script else note or "repro script not written")
        out.append(f"Reproduce with: python {self._show(script)}" if script
                   else f"Reproduce with: {replay_line(path, self.target_spec)}")
        return out

    def _show(self, path: Path) -> str:
        try:
            return str(Path(path).resolve().relative_to(self._here))
        except ValueError:
            return str(path)


def replay_line(path: Path, target_spec: str) -> str:
    from .target import BUILTIN
    if target_spec in BUILTIN:
        return f"python -m fuzzrunner replay {path}"
    return f"python -m fuzzrunner replay --target {target_spec} {path}"


# -- fuzz tests -------------------------------------------------------------------------------

def run_marked_campaign(item: pytest.Item, marker, state) -> FuzzCampaign:
    """Fuzz the target of ``@pytest.mark.fuzzrunner(...)`` on ``item`` under the session's options."""
    changes = dict(marker.kwargs)
    target = changes.pop("target", None)
    if marker.args:
        if target is not None or len(marker.args) > 1:
            pytest.fail("@pytest.mark.fuzzrunner takes one target, positionally or as target=.", pytrace=False)
        target = marker.args[0]
    if target is None:
        pytest.fail("@pytest.mark.fuzzrunner needs a target: a built-in name ('reference_runner'), "
                    "'path/to/file.py:OBJ', 'package.module:OBJ' or a Target object.", pytrace=False)
    faults = changes.pop("faults", ())  # one name is one fault (fuzz: arguments.several), a wrong type one line
    for name in ("sanitizer", "device"):  # the command line overrides the marker, the marker the ini file
        value = getattr(state, name)
        if value is not None and (name in state.from_command_line or name not in changes):
            changes[name] = value
    # one shard per test: shard processes would not see the test's import path (_importable below), and
    # pytest-xdist already runs one test per GPU
    changes.setdefault("precheck_workers", 1)
    settings, context = _settings_and_context(item, state.profile, changes)
    spec = state.target_spec(target, item)
    import fuzzrunner
    failure = ""
    try:
        with _importable(item.path.parent, state.config.rootpath), sigterm_stops():
            result = fuzzrunner.fuzz(spec, settings=settings, context=context, faults=faults, corpus=state.corpus)
    except InvalidArgument as e:
        failure = f"@pytest.mark.fuzzrunner on {item.name}: {e}"
    except HarnessError as e:
        failure = f"the harness broke (this is not a finding): {e}"
    if failure:  # outside the except: the one line, without "During handling of the above exception"
        pytest.fail(failure, pytrace=False)
    if result.stop_reason is StopReason.INTERRUPTED:  # Ctrl-C or SIGTERM: the campaign stopped cleanly; so does pytest
        raise KeyboardInterrupt(f"fuzzrunner campaign of {spec} interrupted")
    item.user_properties.append(("fuzzrunner_cases", result.examples))
    if state.show_coverage:  # only then: user properties also go into JUnit XML
        cov = result.coverage.to_dict()
        del cov["pairs"]  # the terminal table needs the counts only
        item.user_properties.append((PYTEST_PROPERTY, cov))
    return FuzzCampaign(result, spec, state.profile, state.repro_dir, state.config.invocation_params.dir)


def _settings_and_context(item: pytest.Item, profile_name: str, changes: dict):
    """The test's settings (the profile's, the marker's and the session's changes over them, the environment's
    defaults) and the run's context, resolved once (``env_defaults.resolved``) and handed to the campaign: the
    GPU-skip probe used to resolve a context of its own and the campaign another."""
    from .settings import profile
    try:
        settings = profile(profile_name).override(**changes)
    except InvalidArgument as e:
        failure = f"@pytest.mark.fuzzrunner on {item.name}: {e}"
    else:
        return resolved_or_skip(settings)
    pytest.fail(failure, pytrace=False)  # outside the except: the one line


def resolved_or_skip(settings):
    """``env_defaults.resolved(settings)``: the settings and the one context the run gets. A device or sanitizer
    that cannot be had here (no GPU) skips, saying why; a GPU without the sanitizer's tool fails, one line."""
    from .env_defaults import resolved
    from .errors import DeviceUnavailable, SanitizerNotFound
    try:
        return resolved(settings)
    except DeviceUnavailable as e:
        skip = f"{e} (drop --fuzzrunner-sanitizer)" if settings.sanitizer not in (None, "none") else str(e)
    except SanitizerNotFound as e:  # a GPU without the tool: the set-up's error, one line
        pytest.fail(str(e), pytrace=False)
    pytest.skip(skip)


def _sigterm_interrupts(signum, frame):
    raise KeyboardInterrupt("signal SIGTERM")


@contextmanager
def sigterm_stops():
    """While workers run, SIGTERM (CI cancelling the job) ends like Ctrl-C: the campaign or replay
    stops, its hub removes its workers and temp folders, and pytest reports the interruption. By
    default SIGTERM ended pytest at once and left ``fzr-hub-*`` folders behind (issue 23)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _sigterm_interrupts)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)


@contextmanager
def _importable(*dirs: Path):
    """Worker processes can import modules that sit beside the test file (``module:OBJ`` targets)."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([*map(str, dirs), *([old] if old else [])])
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


# -- the corpus as regression tests -----------------------------------------------------------

def replay_corpus_file(path: Path, state) -> None:
    """Replay one finding or case file in a worker: pass while nothing shows (``Verdict.GONE``), raise
    ``CorpusRegression`` while anything does (a tool's limitation alone too), fail when it cannot be checked."""
    from .engine.replay import Verdict
    try:
        case, finding = load_any(path)
    except InvalidCase as e:
        raise CorpusRegression(f"cannot replay {path}: {e}") from None
    replayer = _replayer(state)  # the session's context, resolved once: skips here where it cannot be had
    spec = _own_spec(finding) or _target_for(case.target, state, finding.target_spec if finding else "")
    try:
        with sigterm_stops():
            replay = replayer.verdict(case, spec, finding, finding.case_timeout_s if finding else None)
    except UnsupportedCase as e:  # the release under test cannot run it (another release can): not a regression
        pytest.skip(f"{path}: not supported by this release of target {case.target!r}: {e}")
    except InvalidCase as e:
        raise CorpusRegression(f"{path} no longer runs on target {case.target!r}: {e}") from None
    if replay.verdict.shows or replay.verdict is Verdict.LIMITED:
        raise CorpusRegression(_regression_report(path, case, finding, replay, spec))
    if replay.verdict is Verdict.CANNOT_CHECK:  # not reproduced in the other shadow mode: no proof it is gone
        pytest.fail(f"{path}: could not check: not reproduced, but {replay.unchecked}", pytrace=False)


def _regression_report(path, case, finding, replay, spec) -> str:
    """What a failing corpus item prints: under a violation whose root cause the target names a known bug, its label
    (``known: E1: ...``), once per bug, as ``fuzzrunner replay`` prints it (before, only the CLI did)."""
    violations, same = replay.seen, replay.same
    said: list = []  # the known bugs labelled so far

    def known(v, indent: str) -> list[str]:
        label = replay.known_label(v)
        if label is None or any(label is s for s in said):
            return []
        said.append(label)
        return [f"{indent}{known_text(label)}"]
    if same:
        head = [f"{path}: the saved bug REPRODUCES", f"  {same[0].signature.short()}", f"  {same[0].message}",
                *known(same[0], "  ")]
        rest = [v for v in violations if v is not same[0]]
    else:
        was = f" (saved for: {finding.signature.short()})" if finding else ""
        head = [f"{path}: {len(violations)} violation{'s' * (len(violations) != 1)}{was}"]
        rest = list(violations)
    rest = sorted(rest, key=lambda v: names.KINDS[v.kind].priority)
    for v in rest[:3]:
        head += [f"  also: {v.signature.short()}: {v.message}", *known(v, "    ")]
    if len(rest) > 3:
        head.append(f"  ... and {len(rest) - 3} more")
    head += ["  case:", *("    " + line for line in case_text(case).splitlines()),
             f"  Reproduce with: {replay_line(path, spec)}"]
    return "\n".join(head)


def _own_spec(finding) -> str | None:
    """The ``FILE.py:OBJ`` a finding was found with, if that file is still there: several test files
    may define targets of one name, and a finding replayed with another's file passed while its bug
    was live (issue 23). A built-in target's finding is the built-in's, whatever the ini maps its name
    to (a user's target may take a built-in name: ``target.recorded_for``)."""
    from .target import is_builtin
    spec = finding.target_spec if finding is not None else ""
    if spec and is_builtin(spec):
        return spec
    path = TargetSpec.parse(spec).file
    return spec if path is not None and os.path.isfile(path) else None


def _target_for(name: str, state, recorded: str | None = "") -> str:
    """A corpus case names its target; find a spec a worker can load for that name (one only: a name
    that several fuzz tests' files define cannot tell which, and fails saying so). A finding that
    ``recorded`` a spec of the user's never goes to the built-in target of the same name
    (``target.recorded_for``)."""
    from .target import BUILTIN, load_target, recorded_for
    if name in state.targets:
        return state.targets[name]
    if name in BUILTIN and recorded_for(recorded, name):
        return name
    specs: list[str] = []
    for spec in dict.fromkeys(state.candidates):  # targets named by this session's fuzz tests, loaded only now
        try:
            if load_target(spec).name == name:
                specs.append(spec)
        except Exception:
            continue
    if len(specs) > 1:
        pytest.fail(f"corpus target {name!r} is defined by several files of this session's fuzz tests "
                    f"({', '.join(specs)}): a corpus case names only its target, so it cannot tell which. Give "
                    f"the targets distinct names, or map this one in the pytest ini file "
                    f"(`fuzzrunner_targets = {name} = FILE.py:TARGET`).", pytrace=False)
    if specs:
        state.targets[name] = specs[0]
        return specs[0]
    what = (f"was found by {recorded} (not the built-in target of that name)" if name in BUILTIN
            else "is not built in")
    pytest.fail(f"corpus target {name!r} {what} and no fuzz test of this session fuzzes it: name it "
                f"in the pytest ini file, e.g. `fuzzrunner_targets = {name} = tests/my_runner.py:TARGET`.",
                pytrace=False)


def _replayer(state):
    """One replayer for all corpus items of the session (a worker per target: torch starts once), running
    exactly the oracles a campaign with the session's settings runs."""
    if state.replayer is None:
        from .engine.replay import Replayer
        from .settings import profile
        settings, context = resolved_or_skip(profile(state.profile).override(device=state.device,
                                                                             sanitizer=state.sanitizer))
        # one GPU per xdist worker, already pinned
        state.replayer = Replayer(settings, inherit_gpu=True, context=context)
    return state.replayer
