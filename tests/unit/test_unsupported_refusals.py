"""Every refusal of a built-in target that is about the release under test or its environment (a knob, backend,
runner or device the release does not ship) is an ``UnsupportedCase``, which a campaign keeps in the corpus and
skips; an ``InvalidCase`` is about the case itself, and its file is quarantined. Before, all were ``InvalidCase``:
a corpus case one release refused was quarantined, and the next campaign on the release that runs it lost it."""

import ast
import re
from pathlib import Path

from fuzzrunner.errors import InvalidCase, UnsupportedCase

TARGETS = Path(__file__).resolve().parents[2] / "targets"
# a message that names the release (its version, "this vLLM") or what it lacks (an unavailable part, its own refusal)
RELEASE = re.compile(r"\.version\b|\bthis (vLLM|SGLang|release)\b|unavailable|vLLM refuses")


def _refusals():
    for path in sorted(TARGETS.rglob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                    getattr(node.exc.func, "id", "") in ("InvalidCase", "UnsupportedCase"):
                yield f"{path.relative_to(TARGETS)}:{node.lineno}", node.exc.func.id, \
                    ast.get_source_segment(source, node.exc)


def test_a_refusal_that_names_the_release_is_an_unsupported_case():
    refusals = list(_refusals())
    wrong = [where for where, error, text in refusals if error == "InvalidCase" and RELEASE.search(text)]
    assert wrong == [], f"refusals about the release raised as InvalidCase (make them UnsupportedCase): {wrong}"
    # the scan sees the targets' refusals of both kinds (a pattern or a path gone stale would pass on nothing)
    kinds = {error for _, error, _ in refusals}
    assert kinds == {"InvalidCase", "UnsupportedCase"}
    assert sum(error == "UnsupportedCase" for _, error, _ in refusals) >= 13


def test_an_unsupported_case_is_an_invalid_case():
    """Everything that catches InvalidCase (the search's reject, replay's refusal) still catches it."""
    assert issubclass(UnsupportedCase, InvalidCase)
