"""What README counts, counted: a new user's trial read "two new vLLM bugs" and "four bugs of SGLang's own" where
docs/findings/ had more pages and the targets named more known bugs, and a Layout without ``targets/sglang_engine``.
Each number README gives is computed here from what it counts."""

import re
from importlib import import_module
from pathlib import Path

from fuzzrunner.target import BUILTIN

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "twenty-one", "twenty-two", "twenty-three",
         "twenty-four", "twenty-five"]


def _readme() -> str:
    return " ".join((ROOT / "README.md").read_text().split())


def test_readme_counts_the_findings_pages_and_each_targets_known_bugs():
    pages = [p.name for p in (ROOT / "docs" / "findings").glob("*.md") if p.name != "README.md"]
    sglang = [p for p in pages if p.startswith("sg")]  # sg1-, sg2-, sglang-g1- ...; vLLM's: e1-, m1-, v0- ...
    vllm_known = import_module("fuzzrunner.targets.vllm_engine.known").BUGS
    sglang_known = import_module("fuzzrunner.targets.sglang_engine.known").BUGS
    text = _readme()
    said = (f"{WORDS[len(pages)].capitalize()} bugs have a findings page in [docs/findings/](docs/findings/README.md), "
            f"{WORDS[len(pages) - len(sglang)]} of vLLM",
            f"and {WORDS[len(sglang)]} of SGLang",
            f"`vllm_engine` names {WORDS[len(vllm_known)]} ({', '.join(sorted(vllm_known, key=_order))})",
            f"`sglang_engine` {WORDS[len(sglang_known)]} (its {WORDS[len(sglang)]} and "
            f"{WORDS[len(sglang_known) - len(sglang)]} found or fixed upstream)",
            f"It found {WORDS[len(sglang)]} bugs of SGLang's own")
    missing = [s for s in said if s not in text]
    assert not missing, missing


def _order(bug: str) -> tuple:
    """README's order of vllm_engine's known bugs: V0, V1 (the runner bugs), E1, E2 (its own), then the others."""
    return (["V0", "V1", "E1", "E2", "P1", "L1", "S1", "W1"] + [bug]).index(bug), bug


def test_readmes_layout_names_every_built_in_target():
    layout = _readme().split("## Layout", 1)[1].split("```", 2)[1]
    line = re.search(r"targets/ built-in targets, installed as fuzzrunner\.targets: ([a-z_]+(?:, [a-z_]+)*)", layout)
    assert line, layout[:500]
    assert {n.strip() for n in line.group(1).split(",")} == set(BUILTIN)
    assert {p.name for p in (ROOT / "targets").iterdir() if (p / "__init__.py").exists()} == set(BUILTIN)


def test_each_vllm_known_labels_runner_ranges_are_the_findings_pages():
    """`replay` of P1's case printed "open in ... 0.15.0 - 0.33.0 (V1 runner, its last release)" where
    docs/findings/README.md, docs/vllm.md and docs/reach.md say the V1 runner has P1 in 0.12.0 - 0.33.0 by source
    (``source_facts`` ``P1_v1``; new-user trial): the range a label gives each runner is the findings table's."""
    known = import_module("fuzzrunner.targets.vllm_engine.known").BUGS
    table = (ROOT / "docs" / "findings" / "README.md").read_text()
    checked = 0
    for bug, entry in known.items():
        row = next((line for line in table.splitlines() if re.match(rf"\| (\[)?{bug}(\])?[ (]", line)), None)
        for runner in ("V1 runner", "V2 runner"):
            said = re.search(rf"(\d+\.\d+\.\d+ - \d+\.\d+\.\d+) \({runner}", entry["status"])
            page = re.search(rf"{runner} (\d+\.\d+\.\d+ - \d+\.\d+\.\d+)", row or "")
            if said and page:
                assert said.group(1) == page.group(1), (bug, runner, entry["status"], page.group(0))
                checked += 1
    assert checked >= 2  # P1's two runners at least
