"""The command line's options and their errors (fuzzrunner/cli/parser.py), as a new user meets them: every error
names what was typed and where to read more; `nightly` takes what `fuzz` takes for a campaign; listings stay in
columns."""

from __future__ import annotations

import argparse

import pytest

from fuzzrunner.cli import main, parser
from fuzzrunner.engine.stages import table
from fuzzrunner.text import aligned


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("argv, command", [
    (["--bogus"], "fuzzrunner"),
    (["fuzz", "--target", "reference_runner", "--bogus"], "fuzzrunner fuzz"),
    (["nightly", "--bogus", "x"], "fuzzrunner nightly"),
    (["faults", "--bogus"], "fuzzrunner faults"),
    (["replay", "a.json", "--bogus"], "fuzzrunner replay"),
    (["bogus"], "fuzzrunner"),
])
def test_an_unknown_option_or_command_says_which_help_to_read(capsys, argv, command):
    """A new user's trial: `fuzz ... --bogus` said 'unrecognized arguments: --bogus' and nothing more (argparse's
    top level refuses leftovers, and only subcommands' errors had the hint)."""
    err = _error(capsys, argv)
    assert err.endswith(f"(see `{command} --help`)"), err


@pytest.mark.parametrize("argv", [["fuzz", "--bogus"], ["fuzz", "--bogus=1", "--seed", "-1"], ["faults", "-x"]])
def test_an_unknown_option_is_named_before_a_missing_required_one(capsys, argv):
    """A new user's trial: `fuzz --bogus` said only "the following arguments are required: --target"."""
    err = _error(capsys, argv)
    assert err.startswith(f"fuzzrunner: error: unrecognized arguments: {argv[1]} (see `fuzzrunner {argv[0]} --help`)"), err


def test_an_abbreviated_option_is_no_unknown_one(capsys):
    err = _error(capsys, ["fuzz", "--max-ex", "3"])
    assert err.startswith("fuzzrunner: error: the following arguments are required: --target"), err


@pytest.mark.parametrize("flag, value, said", [
    ("--shape-palette", "-1", "--shape-palette -1 must be a number of case shapes"),
    ("--budget", "-1", "--budget -1 must be a number of seconds above 0"),
    ("--max-ops", "0", "--max-ops 0 must be an integer from 1 to 64"),
    ("--workers", "0", "--workers 0 must be an integer from 1 to 256"),
    ("--precheck-workers", "0", "--precheck-workers 0 must be an integer from 1 to 64, or leave it out for"),
    ("--max-worker-rss", "-5", "--max-worker-rss -5 must be a positive number of megabytes, or leave it out to"),
    ("--case-timeout", "0", "--case-timeout 0 must be a number of seconds above 0"),
    ("--max-examples", "-1", "--max-examples -1 must be at least one"),
])
def test_a_bad_flag_value_is_refused_naming_the_flag_first(capsys, flag, value, said):
    """`--shape-palette -1` was refused as 'shape_palette=-1 (--shape-palette) must be ...': the library's field
    first. The class: every flag that sets a setting."""
    err = _error(capsys, ["fuzz", "--target", "reference_runner", flag, value])
    assert err.startswith(f"fuzzrunner: error: {said}"), err
    assert "_" not in err.split(" must ")[0] and "=None" not in err, err


def test_every_setting_flag_is_mapped_to_its_flag():
    from fuzzrunner.settings import Settings
    fields = set(Settings.__dataclass_fields__)
    assert set(parser.FLAGS) <= fields
    assert set(parser.FLAGS.values()) <= _options("fuzz")


# what only `fuzz` takes, and why: anything else `fuzz` has for a campaign, `nightly` has too
FUZZ_ONLY = {"--target": "nightly fuzzes every built-in target", "--fault": "a planted bug is one target's",
             "--oracle": "the targets' oracles differ", "--no-shrink": "nightly findings are shrunk for their repro",
             "--no-cpu-triage": "nightly triages its GPU findings", "--precheck-workers": "a one-target GPU knob",
             "--report": "--report-dir", "--junit": "--report-dir", "--html": "--report-dir"}


def _options(command: str) -> set[str]:
    sub = next(a for a in parser._parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {o for a in sub.choices[command]._actions for o in a.option_strings if o.startswith("--")}


def test_nightly_takes_every_campaign_option_fuzz_takes():
    """A new user's trial: `nightly` had no --stage-times or --shape-palette."""
    missing = _options("fuzz") - _options("nightly") - set(FUZZ_ONLY)
    assert not missing, f"fuzz options nightly lacks: {sorted(missing)} (add them, or to FUZZ_ONLY with why)"
    args = parser._parser().parse_args(["nightly", "--stage-times", "--shape-palette", "4", "--device", "cpu"])
    assert args.stage_times and parser._settings(args).shape_palette == 4


def test_listings_keep_their_columns_whatever_the_names():
    """`fuzzrunner faults` wrote `{name:28}`: a longer fault name pushed its description out of line."""
    rows = [("short", "one"), ("a_fault_name_of_thirty_five_letters", "two"), ("x", "")]
    lines = aligned(rows)
    assert {line.index(text) for line, (_, text) in zip(lines, rows) if text} == {len(rows[1][0]) + 2}
    assert lines[2] == "x"
    text = table({"oracle:a_plugin_oracle_named_at_length": 1.0, "run": 2.0}, 3.0, 4).splitlines()
    assert len({len(line) for line in text[:-2]}) == 1, text  # every row as wide: the numbers in line


LONG_FAULTS = '''
from hypothesis import strategies as st
from fuzzrunner.target import Target
TARGET = Target("long", "faults with long names", lambda faults=(), *, max_ops=5: st.nothing(), lambda case, ctx: None,
                faults=("lora_state_keeps_finished_adapter", "short"),
                fault_descriptions={"lora_state_keeps_finished_adapter": "Keeps it. More.", "short": "Short one."})
'''


def test_faults_lists_in_columns_past_28_characters(capsys, tmp_path):
    (tmp_path / "long_target.py").write_text(LONG_FAULTS)
    assert main(["faults", "--target", f"{tmp_path / 'long_target.py'}:TARGET"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.index(said) for line, said in zip(lines, ("Keeps it.", "Short one."))] == [35, 35], lines


def test_faults_marks_a_fault_that_cannot_run_here_with_why(capsys, tmp_path):
    """`faults --target sglang_engine` on 0.5.11 listed drain_never_cleared like any other fault, though `fuzz
    --fault drain_never_cleared` refuses it there ("cannot run here: ..."): the listing now says so, with the
    reason; a fault that can run is listed as before."""
    text = LONG_FAULTS.replace('"Short one."})', '"Short one."},\n                faults_unavailable={"short": "no such part"})')
    (tmp_path / "long_target.py").write_text(text)
    assert main(["faults", "--target", f"{tmp_path / 'long_target.py'}:TARGET"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert lines[0].split() == ["lora_state_keeps_finished_adapter", "Keeps", "it."]
    assert lines[1].split(None, 1) == ["short", "[unavailable here: no such part] Short one."]


@pytest.mark.parametrize("doc, first", [
    ("A full pool evicts one of them, i.e. one the current batch needs: it crashes. Then more.",
     "A full pool evicts one of them, i.e. one the current batch needs: it crashes."),
    ("Skips the mapping, e.g. in dummy runs. The rest.", "Skips the mapping, e.g. in dummy runs."),
    ("Reads v1.2. Later.", "Reads v1.2."),
    ("No full stop at all", "No full stop at all."),
    ("One sentence only.", "One sentence only."),
    ("", ""),
])
def test_faults_shows_each_descriptions_first_sentence_whole(doc, first):
    """`fuzzrunner faults` cut "..., i.e. one the current batch needs: ..." at "i.e." (a new user's trial)."""
    from fuzzrunner.cli.commands import _first_sentence
    assert _first_sentence(doc) == first


def test_faults_says_which_release_and_tree_the_availability_was_judged_on(capsys, tmp_path):
    """`faults --target sglang_engine` marked faults unavailable without saying on which release (the answer changes
    with FUZZRUNNER_SGLANG_VERSION): the header names the target's code under test; a target of our own code names
    none."""
    code = '{"engine": "sglang", "release": "0.5.11", "tree": "/t/0.5.11/site"}'
    text = LONG_FAULTS.replace('"Short one."})', f'"Short one."}},\n                code_under_test={code})')
    (tmp_path / "long_target.py").write_text(text)
    assert main(["faults", "--target", f"{tmp_path / 'long_target.py'}:TARGET"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("planted faults of target long on sglang 0.5.11 at /t/0.5.11/site (turn one on"), header
    (tmp_path / "own_target.py").write_text(LONG_FAULTS)
    assert main(["faults", "--target", f"{tmp_path / 'own_target.py'}:TARGET"]) == 0
    assert capsys.readouterr().out.startswith("planted faults of target long (turn one on")
