"""Before any search: replay the corpus (saved findings, then seed cases), then the target's own
seed cases, through the shard.

A finding that still reproduces is known again (and keeps its shrink state, so an interrupted
shrink resumes); one that shows something else is recorded as what it shows now. A file that
cannot be read is quarantined and the campaign goes on. A case the release under test cannot run
(``UnsupportedCase``: a backend or knob it does not ship) is kept where it is and skipped, counted in
one line per campaign: a later campaign on a release that runs it replays it again.
"""

from __future__ import annotations

import dataclasses

from ..errors import InvalidCase, NewerSchema, SkippedFile, UnreadableFile, UnsupportedCase
from ..target import is_builtin, recorded_for
from ..text import plural
from . import events


def replay_corpus(shard) -> None:
    corpus, result = shard.corpus, shard.result
    if shard.index != 0:
        return

    def bad(path, moved, error, *, ran: bool = False) -> None:
        result.quarantined.append((str(path), str(moved) if moved else None, str(error)))
        if not _in(corpus, path):  # the target's own seed: never moved, and not unreadable when its release refuses it
            shard.emit(events.WarningEvent(f"seed case {path} not run (left in place): {_said(path, error)}"))
            return
        shard.emit(events.WarningEvent(bad_corpus_file(path, moved, error, ran=ran)))

    entries = _own(shard, corpus.entries(shard.target.name, on_bad=bad) if corpus is not None else [])
    if corpus is not None:
        entries = _drawn(shard, entries, "case", f"of {shard.target.name!r} in the corpus {corpus.root}")
    for source, (path, case, finding) in [("corpus", e) for e in entries] + [("seed", e) for e in
                                                                             _seed_entries(shard, bad)]:
        if not set(case.faults) <= set(shard.faults):
            continue  # recorded with planted faults: replays only in campaigns that plant them
        shard.replaying = (source, str(path))  # a bug it shows reads "reproduced from its seed", not "found after"
        try:
            _replay(shard, path, case, finding, bad)
        finally:
            shard.replaying = None
    _say_unsupported(shard)


def bad_corpus_file(path, moved, error, *, ran: bool = False) -> str:
    """The one warning line for a corpus file that was not replayed: what is wrong first (a malformed file, with
    its parse or schema error; a case its target refused when ``ran``; an unreadable file: no permission, an I/O
    error; a file left for a newer fuzzrunner or not a regular file), then where it went. Before, all read
    "unreadable corpus file", as if a malformed case were a permission problem (new-user trial)."""
    if isinstance(error, (NewerSchema, SkippedFile)):
        return f"corpus file {path} not read (left in place): {_said(path, error)}"
    what = ("unreadable corpus file" if isinstance(error, UnreadableFile) else "invalid corpus case" if ran
            else "malformed corpus file")
    return f"{what} {path} ({f'moved to {moved}' if moved else 'could not be moved'}): {_said(path, error)}"


def _said(path, error) -> str:
    """The error in one line, without the file's name it starts with (the warning names the file once)."""
    return " ".join(str(error).removeprefix(f"{path}: ").split())


def _replay(shard, path, case, finding, bad) -> None:
    """Replay one corpus or seed case: a finding that still reproduces is known again, anything else recorded."""
    corpus, result = shard.corpus, shard.result
    try:
        violations = shard.execute(case)
    except UnsupportedCase as e:  # the release's refusal, not the file's fault: kept for the releases that run it
        result.unsupported.append((str(path), str(e)))
        return
    except InvalidCase as e:
        bad(path, corpus.quarantine(path) if _in(corpus, path) else None, e, ran=True)
        return
    _count_features(shard, case)
    still = finding is not None and bool(finding.reproduced_by(violations))
    result.replayed.append((str(path), finding.id if finding else None, still if finding else bool(violations)))
    if still and finding.moved(violations):
        _refile(shard, finding, violations, case)
    elif still:
        shard.book.adopt(finding)
        shard.emit(events.RegressionEvent(finding, str(path)))
    elif violations:
        shard.record(violations, case)


def _say_unsupported(shard) -> None:
    """One line per campaign for the corpus cases the release under test refused (kept), one for the target's
    seeds: how many, by what, the first reason; the report's ``unsupported`` lists each with its reason."""
    skipped = shard.result.unsupported
    code = shard.target.code_under_test
    by = shard.target.name + (f" {code['engine']} {code['release']}" if code.get("engine") and code.get("release")
                              else "")
    for noun, kept, mine in (("corpus case", " (kept)", True), ("seed case", "", False)):
        whys = [why for path, why in skipped if _in(shard.corpus, path) == mine]
        if not whys:
            continue
        others = len(set(whys)) - 1
        more = f" (and {plural(others, 'other reason')}: the report's \"unsupported\" lists each)" if others else ""
        message = f"{plural(len(whys), noun)} not supported by {by}: skipped{kept}; {whys[0]}{more}"
        shard.result.warnings.append(message)
        shard.emit(events.WarningEvent(message))


def _own(shard, entries: list) -> list:
    """The entries that are this target's: a finding recorded by another target of the same name (a
    user's target named like a built-in one, or the other way round) is left alone, said once; before,
    the campaign ran it against its own target and quarantined it as unreadable."""
    mine = [e for e in entries if e[2] is None or recorded_for(e[2].target_spec, shard.target_spec)]
    others = len(entries) - len(mine)
    if others:
        whose = "a target of your own" if is_builtin(shard.target_spec) else "the built-in target"
        message = (f"{plural(others, 'finding')} of {whose} also named {shard.target.name!r} "
                   f"{'is' if others == 1 else 'are'} in the corpus: left alone (each finding belongs to the target "
                   f"spec it recorded; give your target another name to keep their folders apart)")
        shard.result.warnings.append(message)
        shard.emit(events.WarningEvent(message))
    return mine


def _refile(shard, finding, violations, case) -> None:
    """A stored finding whose access now sits in another function or file (renamed or moved): the bug is
    filed under its new id, keeping the old one as an alias (reports, repro scripts and replay
    still know it) and its shrink state; the old file goes."""
    for new, _ in shard.record(violations, case):
        if new.signature.moved_from(finding.signature) and new.id != finding.id:
            shard.book.supersede(finding, new)
            where = new.violation.site or new.violation.location
            shard.emit(events.WarningEvent(f"finding {finding.id} ({finding.signature.short()}): its access is now "
                                           f"at {where} (a renamed or moved function or file): filed as {new.id}"))


def _count_features(shard, case) -> None:
    """A replayed case reaches its features as a generated one does (a finding found by a seed
    must not sit beside "this state was never reached")."""
    if shard.target.features is not None:
        from ..coverage import features_of
        shard.result.coverage.add(features_of(shard.target.features, case, shard.target.name))


def _in(corpus, path) -> bool:
    return corpus is not None and str(path).startswith(str(corpus.root))


def _seed_entries(shard, bad) -> list:
    """The target's own seed cases: a bad one is reported, never moved (it is not the user's file).
    A seed case that plants no fault of its own runs with the campaign's planted faults: it is a
    starting shape for this campaign, like a generated case."""
    from ..corpus import load_any
    out: list = []
    for path in shard.target.seed_files():
        try:
            case, finding = load_any(path)
        except InvalidCase as e:
            bad(path, None, e)
            continue
        out.append((path, case, finding))
    out = _drawn(shard, out, "seed case", f"of {shard.target.name!r}")
    return [(p, dataclasses.replace(c, faults=tuple(shard.faults)) if f is None and not c.faults else c, f)
            for p, c, f in out]


def _drawn(shard, entries: list, noun: str, whose: str) -> list:
    """The ``entries`` the target's ``skip_seed`` keeps: one it leaves out (a config this campaign does not draw, e.g.
    a backend ``FUZZRUNNER_SGLANG_BACKENDS`` narrowed away) is counted, in one warning for all of ``entries`` (the
    target's seeds, the user's corpus: before, the corpus's were replayed and their findings reported)."""
    if shard.target.skip_seed is None:
        return entries
    left_out: dict[str, int] = {}  # {why: how many cases}
    out = []
    for entry in entries:
        why = shard.target.skip_seed(entry[1])
        if why:
            left_out[why] = left_out.get(why, 0) + 1
        else:
            out.append(entry)
    if left_out:
        n = sum(left_out.values())
        whys = list(left_out) if len(left_out) == 1 else [f"{why} ({k})" for why, k in left_out.items()]
        message = f"{plural(n, noun)} {whose} left out of {len(entries)}: {'; '.join(whys)}"
        shard.result.warnings.append(message)
        shard.emit(events.WarningEvent(message))
    return out
