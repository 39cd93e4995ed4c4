"""The pytest plugin: fuzz tests, corpus findings as regression tests, one GPU per xdist worker.

pytest loads this module (entry point ``pytest11: fuzzrunner``) in every session, so it
stays light: pytest and the standard library only. torch, Triton, Hypothesis and the
engine are imported by ``fuzzrunner.pytest_runtime`` when a fuzz test or a corpus item runs.

A fuzz test::

    @pytest.mark.fuzzrunner(target=TARGET, max_examples=30)
    def test_dummy_runs_never_read_unwritten_slots(fuzzrunner_campaign):
        fuzzrunner_campaign.assert_no_findings()

``--fuzzrunner-corpus DIR`` turns each saved finding and case of DIR into its own test,
named by its signature, that fails while the bug reproduces. See docs/pytest_plugin.md.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .coverage import PYTEST_PROPERTY
from .errors import InvalidCase
from .gpus import gpu_for_index, visible_gpus
from .names import DEVICES, PROFILES, SANITIZERS
from .safe_io import read_text
from .target_spec import TargetSpec

if TYPE_CHECKING:  # (the plugin itself imports it only when a fuzz test runs: it is not light)
    from .pytest_runtime import FuzzCampaign

_OPTIONS = {  # --fuzzrunner-NAME, and its twin ini option fuzzrunner_NAME; the command line wins
    "profile": "settings profile of fuzz tests (default dev)",
    "sanitizer": "run fuzz workers under compute-sanitizer with this tool; skipped where there is no GPU",
    "corpus": "corpus directory: fuzz tests use it, and each saved finding and case in it is collected as a "
              "regression test",
    "repro_dir": "where failing fuzz tests export repro scripts (default .fuzzrunner/repro under the rootdir)",
    "device": "force the device of fuzz workers (default: a GPU if there is one)",
}
_CHOICES = {"profile": PROFILES, "sanitizer": SANITIZERS, "device": DEVICES}
_STATE = pytest.StashKey["_State"]()
CAMPAIGN: pytest.StashKey[FuzzCampaign] = pytest.StashKey()  # the FuzzCampaign of a fuzz test, once its fixture ran


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fuzzrunner", "fuzzrunner: fuzz model runners for uninitialized/stale metadata")
    for name, text in _OPTIONS.items():
        group.addoption(f"--fuzzrunner-{name.replace('_', '-')}", dest=f"fuzzrunner_{name}", default=None,
                        choices=_CHOICES.get(name), metavar=None if name in _CHOICES else "DIR", help=text)
        parser.addini(f"fuzzrunner_{name}", f"default for --fuzzrunner-{name.replace('_', '-')}", default="")
    parser.addini("fuzzrunner_targets", "NAME = SPEC lines: where corpus items find targets that are not "
                                        "built in (SPEC: path/to/file.py:OBJ or package.module:OBJ)",
                  type="linelist", default=[])
    parser.addini("fuzzrunner_pin_gpus", "pin each pytest-xdist worker to one GPU (default true)",
                  type="bool", default=True)
    group.addoption("--fuzzrunner-show-coverage", dest="fuzzrunner_show_coverage", action="store_true",
                    default=False, help="print each fuzz test's coverage table (features of its cases, and the "
                                        "declared ones never reached) in the terminal summary")
    parser.addini("fuzzrunner_show_coverage", "default for --fuzzrunner-show-coverage", type="bool", default=False)


# -- one GPU per xdist worker -----------------------------------------------------------------

def gpu_for_worker(worker_id: str | None, gpus: list[str]) -> str | None:
    """xdist worker ``gwN`` gets GPU N mod len(gpus); the controller or a GPU-less host, none."""
    if not worker_id or not worker_id.startswith("gw") or not worker_id[2:].isdigit():
        return None
    return gpu_for_index(int(worker_id[2:]), gpus)


def pin_xdist_worker(environ=os.environ, list_gpus=None) -> str | None:
    """Set ``CUDA_VISIBLE_DEVICES`` of this xdist worker to its one GPU; return it (None: unchanged)."""
    worker = environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return None  # not an xdist worker: not even nvidia-smi runs
    gpu = gpu_for_worker(worker, visible_gpus(environ, list_gpus) if list_gpus else visible_gpus(environ))
    if gpu is not None:
        environ["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu


_PINNED = pytest.StashKey[object]()


def _pin_once(config: pytest.Config) -> None:
    if _PINNED in config.stash:
        return
    config.stash[_PINNED] = pin_xdist_worker() if config.getini("fuzzrunner_pin_gpus") else None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser, args) -> None:
    _pin_once(early_config)  # before conftest.py files can import torch and initialize CUDA


# -- session state ----------------------------------------------------------------------------

class _State:
    """The options as resolved once per session, and what corpus items share."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.from_command_line = {name for name in _OPTIONS if config.getoption(f"fuzzrunner_{name}")}
        self.profile = self._value("profile") or "dev"
        self.sanitizer, self.device = self._value("sanitizer"), self._value("device")
        corpus, repro = self._value("corpus"), self._value("repro_dir")
        self.corpus = self._path(corpus, "corpus") if corpus else None
        self.repro_dir = self._path(repro, "repro_dir") if repro else config.rootpath / ".fuzzrunner" / "repro"
        self.targets: dict[str, str] = {}   # target name -> spec, for corpus items
        self.candidates: list[str] = []      # specs named by fuzz tests, loaded only if a name is missing
        self.replayer = None                 # one Replayer (a hub per target) shared by corpus items
        self.old_device: str | None = None   # the process's default device before --fuzzrunner-device set it
        self.show_coverage = bool(config.getoption("fuzzrunner_show_coverage")
                                  or config.getini("fuzzrunner_show_coverage"))
        self.coverage: dict[str, dict] = {}  # test node id -> its campaign's coverage (from reports: xdist too)
        for line in config.getini("fuzzrunner_targets"):
            name, sep, spec = line.partition("=")
            if not sep or not name.strip() or not spec.strip():
                raise pytest.UsageError(f"fuzzrunner_targets line {line!r} must read NAME = SPEC, "
                                        f"e.g. toy_runner = tests/toy_runner.py:TARGET.")
            self.targets[name.strip()] = self._spec_path(spec.strip(), [self._ini_dir()])
        self._check()

    def _value(self, name: str) -> str | None:
        return self.config.getoption(f"fuzzrunner_{name}") or self.config.getini(f"fuzzrunner_{name}") or None

    def _ini_dir(self) -> Path:
        return self.config.inipath.parent if self.config.inipath else self.config.rootpath

    def _path(self, value: str, name: str) -> Path:
        base = self.config.invocation_params.dir if name in self.from_command_line else self._ini_dir()
        return (base / value).resolve()

    def _check(self) -> None:
        for name, value in (("profile", self.profile), ("sanitizer", self.sanitizer), ("device", self.device)):
            if value is not None and value not in _CHOICES[name]:
                raise pytest.UsageError(f"fuzzrunner_{name} = {value!r} must be one of {', '.join(_CHOICES[name])}.")
        if self.sanitizer not in (None, "none") and self.device == "cpu":
            raise pytest.UsageError(f"--fuzzrunner-sanitizer {self.sanitizer} needs GPU workers, and "
                                    f"--fuzzrunner-device cpu forbids them: drop one of the two (on the CPU the "
                                    f"shadow oracle checks the same reads).")
        if self.corpus is not None and self.corpus.exists() and not self.corpus.is_dir():
            raise pytest.UsageError(f"--fuzzrunner-corpus {str(self.corpus)!r} is a file; name a directory.")

    def _spec_path(self, spec: str, bases: list[Path]) -> str:
        """``rel/file.py:OBJ`` made absolute (first base where the file exists); other specs as they are."""
        parsed = TargetSpec.parse(spec)
        path = parsed.file
        if path is None or os.path.isabs(path):
            return spec
        for base in bases:
            if (base / path).exists():
                return f"{(base / path).resolve()}:{parsed.obj}"
        return spec

    def target_spec(self, target, item: pytest.Item) -> str:
        """The marker's target as a spec a worker process can load."""
        if isinstance(target, str):
            bases = [item.path.parent, self.config.rootpath, self.config.invocation_params.dir]
            return self._spec_path(target, bases)
        from .target import spec_of  # a Target defined elsewhere: found through its run function's module
        return _module_spec(target, item) or spec_of(target)

    def close(self) -> None:
        if self.replayer is not None:
            self.replayer.close()
            self.replayer = None


def _module_spec(target, item: pytest.Item) -> str | None:
    """``test_file.py:NAME`` when the Target object is a global of the test module itself."""
    module = getattr(item, "module", None)
    path = getattr(module, "__file__", None)
    for name, obj in vars(module).items() if path else ():
        if obj is target:
            return f"{path}:{name}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fuzzrunner(target, faults=(), **settings): a fuzz test of TARGET "
                                       "(a built-in name, path/file.py:OBJ, module:OBJ or a Target object); "
                                       "settings are fuzzrunner.Settings fields (max_examples, budget_s, seed, "
                                       "oracles, ...) over the --fuzzrunner-profile.")
    _pin_once(config)
    state = config.stash[_STATE] = _State(config)
    if state.show_coverage:
        config.pluginmanager.register(_CoverageCollector(state), "fuzzrunner-coverage")
    if state.device:
        from . import env_defaults
        state.old_device = env_defaults.use_device(state.device)  # this process's replays and its workers alike


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    state.close()
    if state.device:
        from . import env_defaults
        env_defaults.restore_device(state.old_device)


def pytest_report_header(config: pytest.Config) -> str | None:
    s = config.stash.get(_STATE, None)
    if s is None:
        return None
    parts = [f"profile {s.profile!r}", f"device {s.device or 'auto'}", f"sanitizer {s.sanitizer or 'none'}"]
    if s.corpus:
        parts.append(f"corpus {s.corpus}")
    return "fuzzrunner: " + ", ".join(parts)


# -- fuzz tests -------------------------------------------------------------------------------

@pytest.fixture
def fuzzrunner_campaign(request: pytest.FixtureRequest):
    """Run the campaign that ``@pytest.mark.fuzzrunner(...)`` describes; a ``FuzzCampaign``."""
    marker = request.node.get_closest_marker("fuzzrunner")
    if marker is None:
        pytest.fail("the fuzzrunner_campaign fixture needs @pytest.mark.fuzzrunner(target=...) on the test, "
                    "e.g. @pytest.mark.fuzzrunner(target='reference_runner', max_examples=30).", pytrace=False)
    from .pytest_runtime import run_marked_campaign
    campaign = run_marked_campaign(request.node, marker, request.config.stash[_STATE])
    request.node.stash[CAMPAIGN] = campaign
    return campaign


@pytest.fixture(autouse=True)
def _fuzzrunner_marked(request: pytest.FixtureRequest) -> None:
    """A marked test runs its campaign even when it does not ask for the fixture."""
    if request.node.get_closest_marker("fuzzrunner") is not None:
        request.getfixturevalue("fuzzrunner_campaign")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    result = yield
    campaign = item.stash.get(CAMPAIGN, None)
    if campaign is not None and not campaign.checked:
        campaign.assert_no_findings()  # type: ignore[attr-defined]  # findings the test body never looked at still fail it
    return result


# -- coverage in the terminal summary ---------------------------------------------------------

class _CoverageCollector:
    """Registered with --fuzzrunner-show-coverage: each fuzz test's coverage, from its reports (so from
    xdist workers too)."""

    def __init__(self, state: _State):
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == PYTEST_PROPERTY and isinstance(value, dict):
                self.state.coverage.setdefault(report.nodeid, value)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or not state.show_coverage:
        return
    terminalreporter.section("fuzzrunner coverage")
    if not state.coverage:
        terminalreporter.write_line("no fuzz test ran a campaign in this session")
        return
    from .coverage import table  # the standard library only: the plugin stays light
    for nodeid, cov in state.coverage.items():
        terminalreporter.write_line(f"{nodeid}:")
        for line in table(cov):
            terminalreporter.write_line("  " + line)


# -- the corpus as regression tests -----------------------------------------------------------

class CorpusFile(pytest.File):
    """A finding or case file of the corpus; holds one ``CorpusItem``."""

    def collect(self):
        yield CorpusItem.from_parent(self, name=corpus_item_name(self.path))


def corpus_files(corpus: Path) -> list[Path]:
    """The corpus' finding and case files (``Corpus.regression_files``): a FIFO, a symlink loop or a huge
    file is left out with a warning, never opened by a test; one that does not parse, its item says so."""
    from .corpus import Corpus  # the standard library, the case and finding records: no engine, no torch

    def skipped(path, e) -> None:
        warnings.warn(pytest.PytestWarning(f"fuzzrunner: {e}"), stacklevel=1)
    return Corpus(corpus).regression_files(on_skip=skipped)


def corpus_item_name(path: Path) -> str:
    """``KIND-TENSOR-KERNEL-ID`` for a finding (its signature), ``case-STEM`` for a case."""
    try:
        data = json.loads(read_text(path))
        sig = data["signature"]
        from .source import files_only  # names never carry a line: a line shift must not rename the test
        parts = [sig.get("kind", ""), files_only(sig.get("tensor", "")), files_only(sig.get("kernel", "")), data["id"]]
    except (InvalidCase, ValueError, KeyError, TypeError, AttributeError):
        # a case, or a file its item will say it cannot read
        from .corpus import FINDINGS, section_of
        parts = ["finding" if section_of(path) == FINDINGS else "case", path.stem]
    name = "-".join(p for p in parts if p)
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


class CorpusItem(pytest.Item):
    """Replays a saved finding or case in a worker process; fails while a violation shows."""

    def runtest(self) -> None:
        from .pytest_runtime import replay_corpus_file
        replay_corpus_file(self.path, self.config.stash[_STATE])

    def repr_failure(self, excinfo, style=None):
        from .pytest_runtime import CorpusRegression
        if isinstance(excinfo.value, CorpusRegression):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"fuzzrunner corpus: {self.name}"


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselection, so both select corpus items too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    state = config.stash[_STATE]
    for item in items:
        marker = item.get_closest_marker("fuzzrunner")
        target = (marker.kwargs.get("target", marker.args[0] if marker.args else None)) if marker else None
        if isinstance(target, str):
            state.candidates.append(state.target_spec(target, item))
        elif target is not None and _module_spec(target, item):
            state.targets.setdefault(getattr(target, "name", ""), _module_spec(target, item))  # type: ignore[arg-type]
    if state.corpus is None:
        return
    for path in corpus_files(state.corpus):
        node = CorpusFile.from_parent(session, path=path)
        found = list(node.collect())
        for item in found:
            config.hook.pytest_itemcollected(item=item)
        config.hook.pytest_collectreport(report=pytest.CollectReport(node.nodeid, "passed", None, found))
        items.extend(found)
