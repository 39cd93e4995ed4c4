"""Every Markdown table of the docs has as many cells in each row as in its header: a new user's trial read
docs/vllm.md's serving-fault table, whose rows had a fifth cell its four-column header drops when rendered."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULE = re.compile(r"^\|[-:| ]+\|$")


def _cells(line: str) -> int:
    """A row's cells; a pipe inside a code span or escaped is not a cell's end."""
    text = re.sub(r"`[^`]*`", "code", line.strip()).replace("\\|", "")
    return len(text.strip("|").split("|"))


def _ragged_rows(text: str) -> list[str]:
    ragged, header, fenced = [], None, False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|"):
            header = None
            continue
        if header is None:
            header = _cells(line)
        elif not RULE.match(line.strip()) and _cells(line) != header:
            ragged.append(f"line {n}: {_cells(line)} cells under a header of {header}")
    return ragged


def test_a_row_with_a_cell_more_than_its_header_is_found():
    assert _ragged_rows("| a | b |\n|---|---|\n| `x|y` | 1 |\n| 1 | 2 | 3 |\n") == [
        "line 4: 3 cells under a header of 2"]


def test_every_docs_table_row_has_its_headers_cells():
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    ragged = {str(p.relative_to(ROOT)): r for p in files if (r := _ragged_rows(p.read_text()))}
    assert not ragged, ragged
