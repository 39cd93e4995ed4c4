"""How a finding showed and what else its case showed, in words: the sources of its sightings (a replayed seed or
corpus case, the search), the known bugs among a campaign's findings counted once, and the other violations of its
root cause told apart from its head. ``finding.py`` records them; reports and the CLI say them."""

from __future__ import annotations

import os

from .text import plural

REPLAYED = {"seed": "reproduced from its seed", "corpus": "reproduced from the corpus case"}


def found_text(found_by: dict, after_examples: int) -> str:
    """How a bug showed, in words: "reproduced from its seed NAME" (a replayed seed case of the target), "reproduced
    from the corpus case NAME", "found from scratch after N examples" (the search's generated cases), joined by
    "and" where it showed both ways; "found after N examples" for a file from before sources were recorded. Before,
    a seed's bug read "found after 3 examples", as if the search had found it (new-user trial)."""
    said = [f"{REPLAYED[k]} {os.path.basename(str(found_by[k]))}" for k in REPLAYED if found_by.get(k)]
    if found_by.get("search"):
        said.append(f"found from scratch after {plural(found_by['search'], 'example')}")
    return " and ".join(said) if said else f"found after {plural(after_examples, 'example')}"


def known_bugs_text(findings) -> str:
    """The known bugs among ``findings`` (``triage["known"]``), each once, with how it showed (``seed``, ``corpus``,
    ``search``): ``4 known bugs: SG1 (seed), G1 (seed, search)``; "" for none. Before, each labelled finding was
    counted: two findings of G1 read "G1, G1" (new-user trial)."""
    bugs: dict[str, dict] = {}
    for f in findings:
        triage = f.get("triage") if isinstance(f, dict) else f.triage
        known = triage.get("known") if isinstance(triage, dict) else None
        if isinstance(known, dict):
            found_by = found_by_of(f.get("found_by")) if isinstance(f, dict) else f.found_by
            bugs.setdefault(str(known.get("id", "?")), {}).update(dict.fromkeys(found_by))
    if not bugs:
        return ""
    order = (*REPLAYED, "search")
    ids = [f"{i} ({', '.join(k for k in order if k in how)})" if how else i for i, how in bugs.items()]
    return f"{plural(len(bugs), 'known bug')}: {', '.join(ids)}"


def found_by_of(d) -> dict:
    """A file's ``found_by`` with the sources this fuzzrunner knows, each of its type (a hand-edited file: the rest
    is left out, never a wrong sentence)."""
    d = d if isinstance(d, dict) else {}
    out: dict = {k: str(d[k]) for k in REPLAYED if isinstance(d.get(k), str)}
    n = d.get("search")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        out["search"] = n
    return out


def merged_found_by(a: dict, b: dict) -> dict:
    """Both sightings' sources: each replayed file's first path, the search's earliest count."""
    out = {**b, **a}
    searched = [n for n in (a.get("search"), b.get("search")) if n]
    if searched:
        out["search"] = min(searched)
    return out


def _in_op(v) -> str:
    op = v.details.get("op_index")
    return f" in op {op}" if op is not None else ""


def same_root_cause(f, shown: int = 2) -> str:
    """The finding's other violations, each told apart from its head: what (kind, tensor, kernel, place, tool) and in
    which op; one of the head's own bug (its id) in another op reads "the same again in op N", one in the head's own
    op is not named. Before, the line named ``others[0]`` alone, with no op: often the head's own signature (its
    read seen again in a later op), so a finding was told it shared a root cause with itself (new-user trial)."""
    head_op = f.violation.details.get("op_index")
    named: dict[str, None] = {}
    again: dict[str, None] = {}
    for v in f.others:
        op = v.details.get("op_index")
        if v.signature.id != f.id:
            named.setdefault(f"{v.signature.short()}{_in_op(v)}", None)
        elif op is not None and op != head_op:
            again.setdefault(str(op), None)
    more = f" (+{len(named) - shown} more)" if len(named) > shown else ""
    parts = ["; ".join(list(named)[:shown]) + more] if named else []
    if again:
        parts.append(f"the same {f.signature.kind} again in {'op' if len(again) == 1 else 'ops'} {', '.join(again)}")
    return "; ".join(parts)
