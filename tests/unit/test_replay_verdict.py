"""The replay verdict: what ``fuzzrunner replay`` prints and exits, and what a pytest corpus item does, for
every thing a replay can see. The worker is stood in for (``Replayer.run`` returns planted violations), so
each outcome is pinned exactly, in a second: the CLI's lines and exit code, the plugin's pass, failure or
regression report."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fuzzrunner import cli
from fuzzrunner.case import Case
from fuzzrunner.cli import render
from fuzzrunner.corpus import Corpus
from fuzzrunner.engine.replay import Replayer
from fuzzrunner.finding import Finding, case_text
from fuzzrunner.violation import Violation

CASE = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]},
            ({"op": "dummy_run", "num_tokens": 1, "kind": "warmup"},))


def _read(location="fuzzrunner/runner/punica.py:103", tensor="token_lora_mapping", **details) -> Violation:
    return Violation("shadow", "uninitialized-read", "_lora_shrink_kernel", location, tensor,
                     f"{tensor}[0] (byte 0): never written", {"op_index": 0, "element": [0], **details})


BUG = _read()
MOVED = _read(location="fuzzrunner/runner/moved_here.py:7")  # the same access, in a renamed file
OTHER = _read(tensor="lora_token_start_loc")
LIMIT = Violation("shadow", "tool-limitation", "", "", "", "the interpreter cannot run this op here")
CRASH = Violation("worker", "crash", "", "", "", "the worker died: signal 11")
CRASH2 = Violation("worker", "crash", "", "", "", "the worker died: signal 6")


@pytest.fixture
def replay(monkeypatch, tmp_path):
    """``replay(saved, seen)``: a corpus file (a finding, or a case when ``saved`` is None) replayed by a worker
    that saw ``seen`` (or whose target raised it); the CLI's (exit code, stdout, stderr) and the plugin's (outcome, message)."""
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "cpu")
    monkeypatch.setenv("FUZZRUNNER_DEVICE", "cpu")
    corpus = Corpus(tmp_path / "corpus")

    def go(saved: Violation | None, seen: list[Violation] | Exception, capsys) -> tuple[tuple, tuple]:
        def run(self, case, spec, timeout_s=None, cut_at=None):
            if isinstance(seen, Exception):
                raise seen
            return list(seen)
        monkeypatch.setattr(Replayer, "run", run)
        path = corpus.save_finding("reference_runner", Finding.of(saved, [], CASE)) if saved else \
            corpus.save_case(CASE, "warm")
        code = cli.main(["replay", str(path)])
        out = capsys.readouterr()
        shown = (code, out.out.replace(str(path), "PATH"), out.err.replace(str(path), "PATH"))
        return shown, _plugin(path)
    return go


def _plugin(path) -> tuple[str, str]:
    from fuzzrunner.pytest_runtime import CorpusRegression, replay_corpus_file
    from fuzzrunner.settings import Settings
    state = SimpleNamespace(sanitizer=None, device=None, targets={}, candidates=[], profile="dev",
                            replayer=Replayer(Settings(device="cpu")))
    try:
        replay_corpus_file(path, state)
    except CorpusRegression as e:
        return "regression", str(e).replace(str(path), "PATH")
    except pytest.fail.Exception as e:
        return "failed", str(e).replace(str(path), "PATH")
    finally:
        state.replayer.close()
    return "passed", ""


SHORT = BUG.signature.short()
CASE_LINES = ["  case:", *("    " + line for line in case_text(CASE).splitlines()),
              "  Reproduce with: python -m fuzzrunner replay PATH"]


def test_a_finding_that_shows_again_is_reproduced(replay, capsys):
    cli_, plugin = replay(BUG, [BUG], capsys)
    assert cli_ == (1, f"PATH: REPRODUCED {SHORT}\n    {BUG.message}\n", "")
    assert plugin == ("regression", "\n".join(["PATH: the saved bug REPRODUCES", f"  {SHORT}", f"  {BUG.message}",
                                               *CASE_LINES]))


def test_a_finding_whose_access_moved_to_another_file_is_reproduced_and_says_where(replay, capsys):
    cli_, plugin = replay(BUG, [MOVED], capsys)
    assert cli_ == (1, f"PATH: REPRODUCED {SHORT} (its access is now in fuzzrunner/runner/moved_here.py: a renamed "
                       f"or moved function or file)\n    {MOVED.message}\n", "")
    assert plugin[0] == "regression" and plugin[1].startswith("PATH: the saved bug REPRODUCES\n")


def test_a_finding_that_no_longer_shows_is_gone(replay, capsys):
    assert replay(BUG, [], capsys) == ((0, f"PATH: NOT REPRODUCED ({SHORT})\n", ""), ("passed", ""))


def test_a_finding_of_the_other_shadow_mode_not_shown_cannot_be_checked(replay, capsys):
    why = ("it was found by the shadow oracle's device mode and this replay ran its cpu mode, which does not see "
           "every access the other does; replay it with FUZZRUNNER_SHADOW=device")
    cli_, plugin = replay(_read(shadow_mode="device"), [], capsys)
    assert cli_ == (2, "", f"fuzzrunner: error: could not check PATH: not reproduced, but {why}\n")
    assert plugin == ("failed", f"PATH: could not check: not reproduced, but {why}")


def test_a_finding_of_the_other_shadow_mode_with_other_violations_shows_them(replay, capsys):
    cli_, plugin = replay(_read(shadow_mode="device"), [OTHER], capsys)
    assert cli_[0] == 1 and cli_[1].startswith("PATH: the original violation is gone, but others appear:\n")
    assert plugin[0] == "regression"


def test_a_finding_gone_while_others_show_fails(replay, capsys):
    cli_, plugin = replay(BUG, [OTHER], capsys)
    other = OTHER.signature.short()
    assert cli_ == (1, f"PATH: the original violation is gone, but others appear:\n    {other}: {OTHER.message}\n",
                    "")
    assert plugin == ("regression", "\n".join([f"PATH: 1 violation (saved for: {SHORT})",
                                               f"  also: {other}: {OTHER.message}", *CASE_LINES]))


def test_only_a_tool_limitation_proves_nothing(replay, capsys):
    """The CLI: could not run (exit 2); the plugin fails the item with the limitation as its violation."""
    cli_, plugin = replay(BUG, [LIMIT], capsys)
    assert cli_ == (2, "", f"fuzzrunner: warning: PATH: tool limitation: {LIMIT.message}\n"
                           f"fuzzrunner: error: could not run PATH: a tool limitation (above)\n")
    assert plugin == ("regression", "\n".join([f"PATH: 1 violation (saved for: {SHORT})",
                                               f"  also: {LIMIT.signature.short()}: {LIMIT.message}", *CASE_LINES]))


def test_a_tool_limitation_beside_the_bug_is_warned_and_the_bug_reproduced(replay, capsys):
    cli_, plugin = replay(BUG, [LIMIT, BUG], capsys)
    assert cli_ == (1, f"PATH: REPRODUCED {SHORT}\n    {BUG.message}\n",
                    f"fuzzrunner: warning: PATH: tool limitation: {LIMIT.message}\n")
    limit = LIMIT.signature.short()
    assert plugin == ("regression", "\n".join(["PATH: the saved bug REPRODUCES", f"  {SHORT}", f"  {BUG.message}",
                                               f"  also: {limit}: {LIMIT.message}", *CASE_LINES]))


def test_a_crash_finding_is_reproduced_by_any_crash(replay, capsys):
    cli_, plugin = replay(CRASH, [CRASH2], capsys)
    assert cli_ == (1, f"PATH: REPRODUCED {CRASH.signature.short()}\n    {CRASH2.message}\n", "")
    assert plugin[0] == "regression" and plugin[1].startswith(f"PATH: the saved bug REPRODUCES\n  {CRASH2.signature.short()}\n")


def test_a_case_that_runs_clean_is_ok(replay, capsys):
    assert replay(None, [], capsys) == ((0, "PATH: ok\n", ""), ("passed", ""))


def test_a_case_with_violations_lists_them(replay, capsys):
    cli_, plugin = replay(None, [BUG, OTHER], capsys)
    other = OTHER.signature.short()
    assert cli_ == (1, f"PATH: 2 violations\n    {SHORT}: {BUG.message}\n    {other}: {OTHER.message}\n", "")
    assert plugin == ("regression", "\n".join(["PATH: 2 violations", f"  also: {SHORT}: {BUG.message}",
                                               f"  also: {other}: {OTHER.message}", *CASE_LINES]))


def test_a_case_with_only_a_tool_limitation_could_not_run(replay, capsys):
    cli_, plugin = replay(None, [LIMIT], capsys)
    assert cli_[0] == 2 and cli_[2].endswith("fuzzrunner: error: could not run PATH: a tool limitation (above)\n")
    assert plugin[0] == "regression" and plugin[1].startswith("PATH: 1 violation\n")


def test_several_files_exit_with_the_worst_could_not_run_first(monkeypatch, tmp_path, capsys):
    """2 (a file could not run) is never hidden behind 1 (one reproduced), nor 1 behind 0."""
    monkeypatch.setenv("FUZZRUNNER_DEVICE", "cpu")
    corpus = Corpus(tmp_path / "corpus")
    seen = {1: [BUG], 2: [], 3: [LIMIT]}  # max_loras -> what its replay sees
    monkeypatch.setattr(Replayer, "run", lambda self, case, spec, timeout_s=None, cut_at=None:
                        list(seen[case.config["max_loras"]]))
    bug, gone, limit = (str(corpus.save_case(Case("reference_runner", {"max_loras": n}, CASE.ops), f"c{n}"))
                        for n in seen)
    assert cli.main(["replay", gone]) == 0
    assert cli.main(["replay", gone, bug]) == 1
    assert cli.main(["replay", bug, limit, gone]) == 2
    capsys.readouterr()



def test_a_finding_the_target_now_refuses_could_not_run(replay, capsys):
    from fuzzrunner.errors import InvalidCase
    refused = InvalidCase("op 0: num_tokens 1 must be at least 2")
    cli_, plugin = replay(BUG, refused, capsys)
    assert cli_ == (2, "", f"fuzzrunner: error: could not run PATH: {refused}\n")
    assert plugin == ("regression", f"PATH no longer runs on target 'reference_runner': {refused}")


# -- the verdict itself: one enum, both front ends map all of it ----------------------------------

FINDING = Finding.of(BUG, [], CASE)


@pytest.mark.parametrize(("seen", "finding", "other_mode", "verdict"), [
    ([BUG], FINDING, None, "REPRODUCED"),
    ([OTHER, BUG], FINDING, "device mode", "REPRODUCED"),
    ([MOVED], FINDING, None, "MOVED"),
    ([OTHER], FINDING, None, "OTHERS"),
    ([OTHER], FINDING, "device mode", "OTHERS"),
    ([OTHER], None, None, "OTHERS"),
    ([LIMIT, OTHER], None, None, "OTHERS"),
    ([], FINDING, None, "GONE"),
    ([], None, None, "GONE"),
    ([], FINDING, "device mode", "CANNOT_CHECK"),
    ([LIMIT], FINDING, None, "LIMITED"),
    ([LIMIT], FINDING, "device mode", "LIMITED"),
    ([LIMIT], None, None, "LIMITED"),
])
def test_judge(seen, finding, other_mode, verdict):
    from fuzzrunner.engine.replay import Verdict, judge
    replay = judge(seen, finding, other_mode)
    assert replay.verdict is Verdict[verdict]
    assert replay.seen == tuple(seen) and replay.violations == [v for v in seen if v is not LIMIT]
    assert replay.limits == tuple(v for v in seen if v is LIMIT)
    assert bool(replay.same) == (verdict in ("REPRODUCED", "MOVED"))
    assert replay.unchecked == (other_mode if verdict == "CANNOT_CHECK" else "")


def test_every_verdict_is_described_and_has_an_exit_code():
    from fuzzrunner.engine.replay import Verdict
    assert set(render._replay_exits()) == set(Verdict)
    assert all(v.describe() for v in Verdict)
    assert {v for v in Verdict if v.shows} == {Verdict.REPRODUCED, Verdict.MOVED, Verdict.OTHERS}
    assert {v for v in Verdict if render._replay_exits()[v] == render.EXIT_FINDINGS} == {v for v in Verdict if v.shows}


def test_a_known_bug_is_labelled_by_the_plugin_as_by_the_cli(replay, monkeypatch, capsys):
    """New-user trial: a corpus item that fails again printed the violation alone, where ``fuzzrunner replay`` of the
    same file says "known: E1: ..." (the target's ``known_bugs``, engine/known.py): the plugin now prints the same label,
    once per known bug, under the violation it names; an unnamed violation gets none."""
    def known_bugs(finding: dict) -> dict | None:
        return {"id": "K1", "title": "never written", "upstream": "example/repo#1"} \
            if finding["violation"]["tensor"] == "token_lora_mapping" else None
    monkeypatch.setattr(Replayer, "__init__", _with_known_bugs(Replayer.__init__, known_bugs))
    label = "known: K1: never written (example/repo#1)"
    cli_, plugin = replay(BUG, [BUG], capsys)
    assert cli_ == (1, f"PATH: REPRODUCED {SHORT}\n    {BUG.message}\n    {label}\n", "")
    assert plugin == ("regression", "\n".join(["PATH: the saved bug REPRODUCES", f"  {SHORT}", f"  {BUG.message}",
                                               f"  {label}", *CASE_LINES]))
    cli_, plugin = replay(None, [CRASH, BUG], capsys)  # a case file: the label under the violation it names only
    crash = CRASH.signature.short()
    assert cli_ == (1, f"PATH: 2 violations\n    {crash}: {CRASH.message}\n    {SHORT}: {BUG.message}\n      {label}\n", "")
    assert plugin == ("regression", "\n".join(["PATH: 2 violations", f"  also: {SHORT}: {BUG.message}", f"    {label}",
                                               f"  also: {crash}: {CRASH.message}", *CASE_LINES]))


def _with_known_bugs(init, known_bugs):
    """A ``Replayer.__init__`` whose target names known bugs (``Replayer.run``, stood in for, does not load one)."""
    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.known_bugs = known_bugs
    return patched
