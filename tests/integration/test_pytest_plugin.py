"""The pytest plugin, driven through pytester: options, fuzz tests, corpus items, xdist.

Inner sessions run in this process (``pytester.runpytest``) unless what is checked is the
process itself (imports, xdist workers). The user's runner is the one of
docs/pytest_plugin.md, taken from the page, so the page stays true.
"""

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import triton  # noqa: F401

# Loaded before any inner session, so that pytester's sys.modules snapshot keeps them: an inner
# session that first imported Triton would have it torn out of sys.modules afterwards.
import fuzzrunner.engine.campaign  # noqa: F401
import fuzzrunner.kernels  # noqa: F401
import fuzzrunner.pytest_runtime  # noqa: F401
from fuzzrunner import Case, replay
from fuzzrunner._env import cuda_present
from fuzzrunner.corpus import Corpus
from fuzzrunner.finding import Finding, primary
from fuzzrunner.gpus import nvidia_smi_gpus, visible_gpus
from fuzzrunner.pytest_plugin import gpu_for_worker, pin_xdist_worker

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
# One xdist group: under `--dist loadgroup` a module's ungrouped tests spread over both workers, each
# setting up the module's fixtures; grouped, `planted_violations` (a replay in a worker) is set up once per CI run.
pytestmark = pytest.mark.xdist_group("pytest_plugin")
DOCS = ROOT / "docs" / "pytest_plugin.md"
INSTALLED = any(e.name == "fuzzrunner" for e in importlib.metadata.entry_points(group="pytest11"))
PLUGIN = () if INSTALLED else ("-p", "fuzzrunner.pytest_plugin")
BUG = "        # self.slot_mapping[:num_tokens].fill_(-1)"
FIX = "        self.slot_mapping[:num_tokens].fill_(-1)"
needs_no_gpu = pytest.mark.skipif(cuda_present(), reason="checks the skip on a machine with no GPU")


def docs_runner() -> str:
    """The complete user test file of docs/pytest_plugin.md."""
    text = DOCS.read_text()
    block = text.split("<!-- tests/integration/test_pytest_plugin.py runs this file", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def run(pytester, monkeypatch):
    """``run(*args)``: an inner pytest session with the plugin, in this process."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    # What these sessions find is the CPU's (the shadow oracle names the reads): the device is pinned, not left
    # to "auto", which is cuda on a GPU machine (the CPU suite runs on the GPU image too)
    monkeypatch.setenv("FUZZRUNNER_DEVICE", "cpu")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # when this file runs under xdist itself

    def run(*args, subprocess=False):
        if subprocess:
            return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", *args)
        # this process imported the plugin already: it cannot be assertion-rewritten again
        return pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning",
                                  *args)
    return run


@pytest.fixture
def my_runner(pytester):
    """The docs' runner, with its planted bug, as tests/test_my_runner.py."""
    pytester.mkdir("tests")
    path = pytester.path / "tests" / "test_my_runner.py"
    path.write_text(docs_runner())
    return path


@pytest.fixture(scope="module", autouse=True)
def planted_violations():
    """A real finding's violations, from a replay in this process before any pytester snapshot.

    That first replay also imports the rest of Triton's interpreter (and ~900 modules more) for
    good: imported inside a test, pytester would drop them from sys.modules afterwards, and
    Triton's bindings would report leaks when this process exits.
    """
    case = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
                [{"op": "dummy_run", "num_tokens": 1, "kind": "warmup"}], ["dummy_run_skips_mapping"])
    return case, replay(case)


@pytest.fixture
def reference_finding(planted_violations):
    """``reference_finding(faults)``: the dummy-run finding, its case with ``faults`` on."""
    case, violations = planted_violations
    main = primary(violations)

    def finding(faults) -> Finding:
        kept = Case(case.target, case.config, case.ops, tuple(faults))
        return Finding(main.signature, kept, main, [v for v in violations if v is not main], minimized=True)
    return finding


# -- loading --------------------------------------------------------------------------------

def test_loading_the_plugin_imports_neither_torch_nor_triton():
    check = ("import sys, fuzzrunner.pytest_plugin; "
             "heavy = [m for m in ('torch', 'triton', 'hypothesis', 'fuzzrunner.api', 'fuzzrunner.pytest_runtime') "
             "if m in sys.modules]; assert not heavy, heavy")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FUZZRUNNER_DEVICE", None)
    subprocess.run([sys.executable, "-c", check], env=env, check=True, cwd=ROOT)


def test_a_session_with_the_plugin_and_no_fuzz_test_never_imports_torch(run, pytester):
    pytester.makepyfile(test_plain="""
        import sys
        def test_plain():
            assert "torch" not in sys.modules and "triton" not in sys.modules
    """)
    run("--fuzzrunner-profile", "ci", subprocess=True).assert_outcomes(passed=1)


def test_the_front_door_exports_what_all_says():
    import inspect

    import fuzzrunner
    for name in fuzzrunner.__all__:
        assert getattr(fuzzrunner, name) is not None
    public = {n for n in dir(fuzzrunner) if not n.startswith("_") and not inspect.ismodule(getattr(fuzzrunner, n))}
    assert public == set(fuzzrunner.__all__) - {"__version__"}  # submodules aside, as in any package
    plug_in_api = {"Oracle", "OracleSpec", "register_oracle", "Kind", "register_kind", "Tool", "register_tool",
                   "register_target", "Violation", "Context"}  # docs/plugins.md
    assert plug_in_api <= set(fuzzrunner.__all__)
    assert fuzzrunner.OracleSpec is fuzzrunner.names.OracleSpec and fuzzrunner.register_target.__module__ == \
        "fuzzrunner.target"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fuzzrunner.nope  # noqa: B018


# -- options --------------------------------------------------------------------------------

def test_every_option_has_help_and_an_ini_twin(run):
    out = run("--help").stdout.str()
    for name in ("profile", "sanitizer", "corpus", "repro-dir", "device"):
        assert f"--fuzzrunner-{name}" in out
        assert f"fuzzrunner_{name.replace('-', '_')} (string)" in out
    assert "fuzzrunner_targets (linelist)" in out and "fuzzrunner_pin_gpus (bool)" in out


def test_the_plugin_repeats_the_settings_choices():
    from fuzzrunner import names, pytest_plugin, settings
    assert pytest_plugin.PROFILES == tuple(settings.PROFILES) == names.PROFILES
    assert pytest_plugin.SANITIZERS == names.SANITIZERS and pytest_plugin.DEVICES == names.DEVICES


@pytest.mark.parametrize("args, ini, message", [
    (["--fuzzrunner-profile", "fast"], "", "invalid choice: 'fast'"),
    ([], "fuzzrunner_profile = fast", "fuzzrunner_profile = 'fast' must be one of dev, ci, nightly"),
    (["--fuzzrunner-device", "cpu", "--fuzzrunner-sanitizer", "initcheck"], "",
     "--fuzzrunner-device cpu forbids them"),
    ([], "fuzzrunner_targets = toy_runner", "must read NAME = SPEC"),
])
def test_a_bad_option_value_is_a_usage_error_that_says_the_rule(run, pytester, args, ini, message):
    pytester.makeini(f"[pytest]\n{ini}\n")
    result = run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_the_profile_is_selected_by_option_or_ini_and_the_marker_overrides_it(run, pytester, my_runner):
    pytester.makepyfile(test_profile="""
        import pytest

        @pytest.mark.fuzzrunner(target="tests/test_my_runner.py:MY_RUNNER", max_examples=3)
        def test_settings(fuzzrunner_campaign):
            r = fuzzrunner_campaign.result
            assert (r.seed, r.settings.max_examples, r.settings.budget_s) == (0, 3, 300)
            assert fuzzrunner_campaign.findings  # the docs' runner has its bug
    """)
    result = run("test_profile.py", "--fuzzrunner-profile", "ci")
    result.assert_outcomes(passed=1)
    assert "fuzzrunner: profile 'ci', device auto, sanitizer none" in result.stdout.str()
    pytester.makeini("[pytest]\nfuzzrunner_profile = nightly\n")
    assert "fuzzrunner: profile 'nightly'" in run("--collect-only", "test_profile.py").stdout.str()


@needs_no_gpu
@pytest.mark.parametrize("args, reason", [
    (["--fuzzrunner-sanitizer", "initcheck"], "compute-sanitizer --tool initcheck needs a CUDA GPU"),
    (["--fuzzrunner-device", "cuda"], "device 'cuda' needs a CUDA GPU"),
])
def test_a_sanitizer_or_cuda_where_there_is_no_gpu_skips_with_the_reason(run, pytester, args, reason):
    pytester.makepyfile(test_fuzz="""
        import pytest

        @pytest.mark.fuzzrunner(target="reference_runner", max_examples=1)
        def test_fuzz(fuzzrunner_campaign):
            fuzzrunner_campaign.assert_no_findings()
    """)
    Corpus(pytester.path / "corpus").save_case(Case("reference_runner", {}, [{"op": "capture", "size": 1}]), "c")
    result = run("-rs", "--fuzzrunner-corpus", "corpus", *args)
    result.assert_outcomes(skipped=2)
    assert result.stdout.str().count(reason) == 2


@needs_no_gpu
def test_a_marker_that_asks_for_a_sanitizer_skips_too(run, pytester):
    pytester.makepyfile(test_fuzz="""
        import pytest

        @pytest.mark.fuzzrunner(target="reference_runner", sanitizer="memcheck", max_examples=1)
        def test_fuzz(fuzzrunner_campaign):
            fuzzrunner_campaign.assert_no_findings()
    """)
    result = run("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*compute-sanitizer --tool memcheck needs a CUDA GPU*"])


def test_device_option_reaches_the_workers_and_is_undone_afterwards(run, pytester, my_runner):
    pytester.makepyfile(test_device="""
        import os, pytest

        @pytest.mark.fuzzrunner(target="tests/test_my_runner.py:MY_RUNNER", max_examples=2)
        def test_device(fuzzrunner_campaign):
            assert os.environ["FUZZRUNNER_DEVICE"] == "cpu"
            assert fuzzrunner_campaign.assert_finds("uninitialized-read", tensor="slot_mapping")
    """)
    os.environ.pop("FUZZRUNNER_DEVICE")  # (monkeypatch restores it): the option alone sets it for the session
    run("test_device.py", "--fuzzrunner-profile", "ci", "--fuzzrunner-device", "cpu").assert_outcomes(passed=1)
    assert "FUZZRUNNER_DEVICE" not in os.environ


# -- fuzz tests -----------------------------------------------------------------------------

def test_a_planted_uninitialized_read_fails_with_the_report_then_passes_once_fixed(run, pytester, my_runner):
    result = run("--fuzzrunner-profile", "ci", "--fuzzrunner-repro-dir", "repro")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert re.search(r"fuzzrunner found [12] bugs? in target 'my_runner' \(\d+ cases in .* s, seed 0, "
                     r"profile 'ci', stopped: max-examples\):", out)
    assert re.search(r"1\. uninitialized-read of slot_mapping in _write_kv_cache at \S*test_my_runner.py:19", out)
    assert "read slot_mapping[0] (byte 0): never written" in out
    result.stdout.fnmatch_lines(["*Falsifying case (1 op, minimized):",
                                 '*{"schema": 1, "target": "my_runner", "faults": [], "config": {}, "ops": [',
                                 '*  {"op": "dummy_run", "num_tokens": 1}', "*]}"])
    scripts = re.findall(r"Reproduce with: python (repro/my_runner/\w+\.py)", out)
    assert scripts and all((pytester.path / s).exists() for s in scripts)
    assert subprocess.run([sys.executable, scripts[0]], cwd=pytester.path, capture_output=True).returncode == 1

    my_runner.write_text(my_runner.read_text().replace(BUG, FIX))
    run("--fuzzrunner-profile", "ci").assert_outcomes(passed=1)


def test_findings_the_test_never_looked_at_still_fail_it(run, pytester, my_runner):
    pytester.makepyfile(test_forgot="""
        import pytest

        @pytest.mark.fuzzrunner(target="tests/test_my_runner.py:MY_RUNNER", max_examples=5)
        def test_forgot_to_assert():
            pass
    """)
    result = run("test_forgot.py", "--fuzzrunner-profile", "ci")
    result.assert_outcomes(failed=1)
    assert "uninitialized-read of slot_mapping" in result.stdout.str()
    assert list((pytester.path / ".fuzzrunner" / "repro" / "my_runner").glob("*.py"))  # the default repro dir


def test_an_unwritable_repro_dir_still_gives_the_report(run, pytester, my_runner):
    (pytester.path / "taken").write_text("a file, not a directory")
    result = run("--fuzzrunner-profile", "ci", "--fuzzrunner-repro-dir", "taken")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Falsifying case (1 op, minimized):*", "*repro script not written*",
                                 "*finding not written to *taken/my_runner/*; use --fuzzrunner-repro-dir DIR"])


def test_assert_finds_says_what_it_expected_and_what_it_found(run, pytester, my_runner):
    pytester.makepyfile(test_finds="""
        import pytest

        @pytest.mark.fuzzrunner(target="tests/test_my_runner.py:MY_RUNNER", max_examples=5)
        def test_expects_a_bug_it_cannot_find(fuzzrunner_campaign):
            fuzzrunner_campaign.assert_finds("numeric-mismatch")
    """)
    result = run("test_finds.py", "--fuzzrunner-profile", "ci")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fuzzrunner expected numeric-mismatch in target 'my_runner' after * cases "
                                 "(seed 0); it found uninitialized-read of slot_mapping*"])


@pytest.mark.parametrize("marker, message", [
    ('target="no_such_file.py:TARGET"', "target file 'no_such_file.py' does not exist"),
    ('target="reference_runner", faults=["dummy_run_skip_mapping"]', "Did you mean 'dummy_run_skips_mapping'?"),
    ('target="reference_runner", max_exampels=3', "unknown setting(s) ['max_exampels']"),
    ("", "@pytest.mark.fuzzrunner needs a target"),
])
def test_a_target_that_cannot_be_set_up_is_an_error_not_a_failure(run, pytester, marker, message):
    pytester.makepyfile(test_broken=f"""
        import pytest

        @pytest.mark.fuzzrunner({marker})
        def test_broken(fuzzrunner_campaign):
            fuzzrunner_campaign.assert_no_findings()
    """)
    result = run()
    result.assert_outcomes(errors=1)
    assert message in result.stdout.str()


# -- the corpus as regression tests ---------------------------------------------------------

SIGNATURE_ID = "uninitialized-read-embeddings_indices-aten.add.Tensor-"


def test_each_corpus_finding_is_a_test_named_by_its_signature_that_fails_while_it_reproduces(run, pytester,
                                                                                          reference_finding):
    finding = reference_finding(["dummy_run_skips_mapping"])
    Corpus(pytester.path / "corpus").save_finding("reference_runner", finding)
    Corpus(pytester.path / "corpus").save_case(Case("reference_runner", {"max_loras": 1}, finding.case.ops), "warm")
    pytester.makepyfile(test_plain="def test_plain(): pass")

    result = run("-v", "--fuzzrunner-corpus", "corpus")
    result.assert_outcomes(passed=2, failed=1)
    sig = SIGNATURE_ID + finding.signature.id
    result.stdout.fnmatch_lines([f"corpus/findings/reference_runner/{finding.signature.id}.json::{sig} FAILED*",
                                 "corpus/cases/reference_runner/warm.json::case-warm PASSED*"])
    out = result.stdout.str()
    assert "the saved bug REPRODUCES" in out and "embeddings_indices[0] (byte 0): never written" in out
    assert f"Reproduce with: python -m fuzzrunner replay {pytester.path}/corpus/findings" in out
    run("-k", "embeddings_indices", "--fuzzrunner-corpus", "corpus").assert_outcomes(failed=1)

    fixed = pytester.path / "fixed"
    Corpus(fixed).save_finding("reference_runner", reference_finding([]))
    result = run("-v", "--fuzzrunner-corpus", "fixed", "-k", "uninitialized")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*::{sig} PASSED*"])


def test_a_corpus_finding_of_the_other_shadow_mode_that_does_not_reproduce_fails_as_unchecked(
        run, pytester, reference_finding, monkeypatch):
    """A finding of the GPU shadow's device mode, replayed by the CPU mode: not reproduced proves nothing
    (each mode sees accesses the other cannot), so the item fails saying so, never passes as fixed."""
    from dataclasses import replace
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "cpu")
    fixed = reference_finding([])
    fixed = replace(fixed, violation=replace(fixed.violation, details={**fixed.violation.details,
                                                                        "shadow_mode": "device"}))
    Corpus(pytester.path / "corpus").save_finding("reference_runner", fixed)
    result = run("-v", "--fuzzrunner-corpus", "corpus", "-k", "uninitialized")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*could not check: not reproduced, but it was found by the shadow oracle's device "
                                 "mode and this replay ran its cpu mode*FUZZRUNNER_SHADOW=device*"])


def test_a_corpus_finding_of_a_users_target_finds_it_through_the_fuzz_test(run, pytester, my_runner):
    pytester.makeini("[pytest]\nfuzzrunner_corpus = corpus\nfuzzrunner_profile = ci\n")
    run().assert_outcomes(failed=1)  # the fuzz test saves its findings in the corpus
    saved = list((pytester.path / "corpus" / "findings" / "my_runner").glob("*.json"))
    result = run("-v", "-k", "not test_dummy_runs")
    result.assert_outcomes(failed=len(saved))
    result.stdout.fnmatch_lines(["*::uninitialized-read-slot_mapping-_write_kv_cache-* FAILED*"])
    my_runner.write_text(my_runner.read_text().replace(BUG, FIX))
    run().assert_outcomes(passed=1 + len(saved))


def test_an_unknown_corpus_target_says_how_to_name_it(run, pytester):
    Corpus(pytester.path / "corpus").save_case(Case("their_runner", {}, [{"op": "x"}]), "one")
    result = run("--fuzzrunner-corpus", "corpus")
    result.assert_outcomes(failed=1)
    assert "fuzzrunner_targets = their_runner = tests/my_runner.py:TARGET" in result.stdout.str()


def test_a_broken_corpus_file_fails_its_own_test(run, pytester):
    (pytester.path / "corpus" / "findings" / "reference_runner").mkdir(parents=True)
    (pytester.path / "corpus" / "findings" / "reference_runner" / "bad.json").write_text("{not json")
    result = run("-v", "--fuzzrunner-corpus", "corpus")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*bad.json::finding-bad FAILED*", "*not valid JSON*"])


RELEASED = """
from hypothesis import strategies as st
from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidCase, UnsupportedCase
from fuzzrunner.target import Target

def run(case, ctx):
    for i, op in enumerate(case.ops):
        if op["n"] == 7:
            raise UnsupportedCase("n=7: release 1.0 has no such knob; leave it out")
        if op["n"] == 8:
            raise InvalidCase("n=8: no release takes n 8; draw 0 to 7")
        with ctx.op(i, op):
            pass

OLD = Target("released", "release 1.0", lambda faults=(), *, max_ops=5: st.integers(0, 6).map(
    lambda n: Case("released", {}, ({"op": "x", "n": n},))), run)
"""


def test_a_corpus_case_the_release_cannot_run_is_skipped_and_one_no_release_runs_fails(run, pytester):
    """An ``UnsupportedCase`` (the release under test lacks a knob another release has) skips its corpus item, with
    the reason; before, it failed as a regression ("no longer runs"), as a malformed case still does."""
    (pytester.path / "released.py").write_text(RELEASED)
    pytester.makeini("[pytest]\nfuzzrunner_targets = released = released.py:OLD\n")
    corpus = Corpus(pytester.path / "corpus")
    corpus.save_case(Case("released", {}, [{"op": "x", "n": 7}]), "knob")
    corpus.save_case(Case("released", {}, [{"op": "x", "n": 8}]), "broken")
    result = run("-v", "-rs", "--fuzzrunner-corpus", "corpus")
    result.assert_outcomes(skipped=1, failed=1)
    result.stdout.fnmatch_lines(["*knob.json: not supported by this release of target 'released': n=7: release 1.0*"])
    result.stdout.fnmatch_lines(["*broken.json no longer runs on target 'released': n=8*"])


# -- pytest-xdist ---------------------------------------------------------------------------

@pytest.mark.parametrize("worker, gpus, expected", [
    ("gw0", ["0", "1", "2"], "0"),
    ("gw4", ["0", "1", "2"], "1"),
    ("gw1", ["5", "7"], "7"),
    ("gw3", ["MIG-a", "MIG-b"], "MIG-b"),
    ("gw1", [], None),            # a CPU host: unchanged
    (None, ["0", "1"], None),     # not an xdist worker (or the controller)
    ("master", ["0", "1"], None),
])
def test_xdist_worker_n_gets_gpu_n_modulo_the_device_count(worker, gpus, expected):
    assert gpu_for_worker(worker, gpus) == expected


SMI = """GPU 0: NVIDIA H200 (UUID: GPU-11111111-aaaa)
GPU 1: NVIDIA H200 (UUID: GPU-22222222-bbbb)
  MIG 3g.71gb     Device  0: (UUID: MIG-aaaa-0001)
  MIG 3g.71gb     Device  1: (UUID: MIG-aaaa-0002)
GPU 2: NVIDIA H200 (UUID: GPU-33333333-cccc)
"""


def test_the_gpu_list_comes_from_cuda_visible_devices_else_nvidia_smi_without_initializing_cuda(monkeypatch):
    fake_smi = lambda: ["0", "1"]  # noqa: E731
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,1"}, fake_smi) == ["3", "1"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, fake_smi) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,-1,3"}, fake_smi) == ["2"]  # CUDA stops at -1
    assert visible_gpus({}, fake_smi) == ["0", "1"]
    assert visible_gpus({}, lambda: []) == []

    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/nvidia-smi")
    fake_run = lambda argv, **kw: subprocess.CompletedProcess(argv, 0, SMI, "")  # noqa: E731
    assert nvidia_smi_gpus(fake_run) == ["0", "MIG-aaaa-0001", "MIG-aaaa-0002", "2"]
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert nvidia_smi_gpus(fake_run) == []


def test_pinning_sets_cuda_visible_devices_of_the_worker_only():
    env = {"PYTEST_XDIST_WORKER": "gw3", "CUDA_VISIBLE_DEVICES": "4,5,6"}
    assert pin_xdist_worker(env) == "4" and env["CUDA_VISIBLE_DEVICES"] == "4"
    env = {"PYTEST_XDIST_WORKER": "gw2"}
    assert pin_xdist_worker(env, lambda: ["0", "1"]) == "0" and env["CUDA_VISIBLE_DEVICES"] == "0"
    env = {"CUDA_VISIBLE_DEVICES": "4,5"}
    assert pin_xdist_worker(env) is None and env["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert pin_xdist_worker({}, lambda: pytest.fail("GPUs listed outside an xdist worker")) is None
    env = {"PYTEST_XDIST_WORKER": "gw1"}
    assert pin_xdist_worker(env, lambda: []) is None and "CUDA_VISIBLE_DEVICES" not in env


WHERE = """
    import os
    def test_where():
        env = os.environ
        print("PINNED", env["PYTEST_XDIST_WORKER"], env.get("CUDA_VISIBLE_DEVICES"), env["SEEN_BY_CONFTEST"])
"""


def test_each_xdist_worker_is_pinned_before_its_conftest_runs(run, pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")  # a fake device list: nothing here touches CUDA
    pytester.makeconftest("import os\nos.environ['SEEN_BY_CONFTEST'] = os.environ['CUDA_VISIBLE_DEVICES']\n")
    pytester.makepyfile(**{f"test_w{i}": WHERE.replace("test_where", f"test_where_{i}") for i in range(6)})
    result = run("-n", "2", "-rP", subprocess=True)  # -rP: the passed tests' output
    result.assert_outcomes(passed=6)
    seen = set(re.findall(r"PINNED (gw\d) (\S+) (\S+)", result.stdout.str()))
    assert seen == {("gw0", "5", "5"), ("gw1", "7", "7")}

    pytester.makeini("[pytest]\nfuzzrunner_pin_gpus = false\n")
    result = run("-n", "2", "-rP", subprocess=True)
    assert set(re.findall(r"PINNED gw\d (\S+) \S+", result.stdout.str())) == {"5,7"}


def test_xdist_on_the_cpu_runs_fuzz_tests_and_corpus_items_and_blames_a_crash_on_its_test(run, pytester, my_runner,
                                                                                        reference_finding):
    my_runner.write_text(my_runner.read_text().replace(BUG, FIX))
    Corpus(pytester.path / "corpus").save_finding("reference_runner", reference_finding([]))
    pytester.makepyfile(test_crash="""
        import os
        def test_kills_its_worker():
            os._exit(1)
        def test_fine():
            pass
    """)
    result = run("-n", "2", "--fuzzrunner-profile", "ci", "--fuzzrunner-corpus", "corpus", subprocess=True)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running*test_kills_its_worker*"])


# -- coverage -------------------------------------------------------------------------------

def test_show_coverage_prints_each_fuzz_tests_table_with_the_features_never_reached(run, pytester, monkeypatch):
    counted = ROOT / "tests" / "integration" / "coverage_targets.py"
    pytester.makepyfile(test_cov=f"""
        import pytest

        @pytest.mark.fuzzrunner(target={str(counted) + ':COUNTED'!r}, max_examples=6, shrink=False, seed=1)
        def test_counted(fuzzrunner_campaign):
            fuzzrunner_campaign.assert_no_findings()
    """)
    monkeypatch.setenv("COVERAGE_LOG", os.devnull)
    result = run("test_cov.py", "--fuzzrunner-show-coverage", "--fuzzrunner-device", "cpu")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "fuzzrunner coverage" in out and "test_cov.py::test_counted:" in out
    assert re.search(r"op=never +0 +0\.0%  NEVER REACHED", out)
    assert re.search(r"op=a +[1-9]\d* ", out) and "declared feature(s) never reached: op=never" in out
    assert "fuzzrunner coverage" not in run("test_cov.py", "--collect-only").stdout.str()


def test_a_corpus_items_name_never_carries_a_line(tmp_path):
    """A finding on an automatically tracked buffer names it ``torch.empty@my_runner.py:15``; the
    test's name must not change when a line is added above it (new-user trial)."""
    import json

    from fuzzrunner.pytest_plugin import corpus_item_name
    f = tmp_path / "abc.json"
    f.write_text(json.dumps({"id": "0441097e7fb3", "signature": {
        "kind": "uninitialized-read", "tensor": "torch.empty@my_runner.py:15", "kernel": "aten.clamp.default"}}))
    assert corpus_item_name(f) == "uninitialized-read-torch.empty_my_runner.py-aten.clamp.default-0441097e7fb3"


def test_a_marker_naming_an_unknown_target_errors_in_one_message_without_a_chained_traceback(run, pytester):
    pytester.makepyfile(test_fuzz="""
        import pytest

        @pytest.mark.fuzzrunner(target="refrence_runner", max_examples=1)
        def test_fuzz(fuzzrunner_campaign):
            fuzzrunner_campaign.assert_no_findings()
    """)
    result = run()
    out = result.stdout.str()
    assert "unknown target 'refrence_runner'" in out and "Did you mean 'reference_runner'" in out
    assert "During handling of the above exception" not in out
