"""Cases and findings on disk: atomic, one file per bug, shared between runs. Storage only.

Layout of a corpus directory:
    findings/<target>/<finding id>.json     one file per distinct bug, rewritten as it shrinks; <target> is the
                                            name (a user's target may share a built-in's: each finding is
                                            its recorded spec's, target.recorded_for)
    expected/<target>/<faults>.<finding id>.json  findings of campaigns with planted faults (not regressions);
                                            their repro scripts: repro/<target>/<faults>.<finding id>.py
    flaky/<target>/<finding id>.json        crashes a fresh worker did not reproduce (not regressions)
    cases/<target>/<name>.json              cases kept as regression seeds (replayed first)
    quarantine/...                          files that could not be read, moved aside (never deleted)
    repro/<target>/<finding id>.py          each finding's repro script (``repro_path``; ``repro.save_repros``)
    hypothesis/<target>/                    Hypothesis' example database (if none is plugged in)
    hypothesis/.storage/                    Hypothesis' own caches (never ./.hypothesis in the working directory)
Every write goes to a temporary file in the same directory, then ``os.replace``: a
``kill -9`` at any moment leaves either the old file or the new one, never half of one. A
symlink among these files is replaced, never followed out of the corpus (others may write to a
shared corpus); a FIFO, device, socket or folder under such a name is refused and left
(``safe_write``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .case import Case, parse_json
from .errors import InvalidCase, NewerSchema, SkippedFile
from .finding import Finding, is_finding_dict
from .safe_io import json_files, read_bytes, read_text, subfolders
from .safe_write import write_file

FINDINGS, CASES = "findings", "cases"  # the regression set's two folders


def section_of(path: Path) -> str:
    """The corpus folder a file of it sits in (``<section>/<target>/<file>``): ``findings``, ``cases``, ..."""
    return Path(path).parent.parent.name


def atomic_write(path: Path | str, text: str, mode: int = 0o644) -> Path:
    """Write ``text`` to ``path``, a file fuzzrunner names in its own folder (the corpus, the plugin's
    repro folder), all at once, readable by others (corpus files are shared); ``OSError`` otherwise."""
    return write_file(path, text, mode=mode, follow=False)


def load_any(path) -> tuple[Case, Finding | None]:
    """A case file or a finding file -> (case, finding or None); ``InvalidCase`` in one line otherwise."""
    data = parse_json(read_text(path), str(path))
    if is_finding_dict(data):
        f = Finding.from_dict(data, source=str(path))
        return f.case, f
    return Case.from_dict(data, source=str(path)), None


class Corpus:
    def __init__(self, root: str | os.PathLike, *, expected: bool = False, faults: tuple = ()):
        """``expected`` (or ``faults``): this campaign plants faults; its findings go to ``expected/``,
        apart from the regression set that corpus replays and the pytest plugin collect, each file
        named after the faults too (``<faults>.<id>.json``): one bug id seen under two different
        planted faults is two expected findings, never one merged over the other."""
        self.root = Path(root)
        self.faults = tuple(sorted(faults))
        self.findings_dir = self.root / ("expected" if expected or faults else FINDINGS)
        self._prefix = safe_name("+".join(self.faults)) + "." if self.faults else ""

    def finding_path(self, target: str, finding_id: str) -> Path:
        return self.findings_dir / safe_name(target) / f"{self._prefix}{finding_id}.json"

    def save_finding(self, target: str, finding: Finding) -> Path:
        return atomic_write(self.finding_path(target, finding.id), json.dumps(finding.to_dict(), indent=2))

    def repro_path(self, target: str, finding_id: str) -> Path:
        """Where the repro script of a finding of ``target`` goes, named as its finding file is (one bug seen
        under two planted faults is two scripts)."""
        return self.root / "repro" / safe_name(target) / f"{self._prefix}{finding_id}.py"

    def set_aside(self, target: str, finding: Finding) -> Path:
        """Move a finding that did not reproduce out of the regression set, into ``flaky/``."""
        own = self.finding_path(target, finding.id)
        path = atomic_write(self.root / "flaky" / safe_name(target) / own.name, json.dumps(finding.to_dict(), indent=2))
        try:
            os.unlink(own)
        except FileNotFoundError:
            pass
        return path

    def load_finding(self, target: str, finding_id: str) -> Finding | None:
        path = self.finding_path(target, finding_id)
        return Finding.load(path) if path.exists() else None

    def save_case(self, case: Case, name: str) -> Path:
        return atomic_write(self.root / CASES / safe_name(case.target) / f"{safe_name(name)}.json",
                            case.to_json(indent=2))

    def _files(self, base: Path, target: str | None, on_skip) -> list[Path]:
        """The ``*.json`` names of ``base/<target>/`` (every target's without one), followed by nothing:
        ``load_any`` reads each through ``safe_io``, which refuses FIFOs, loops and huge files."""
        dirs = [base / safe_name(target)] if target else subfolders(base, on_skip)
        return [p for d in dirs for p in json_files(d)]

    def regression_files(self, on_skip=None) -> list[Path]:
        """Every target's finding and case files (``findings/``, ``cases/``: what the pytest plugin collects),
        listed and read as every other reader does (``safe_io``): a FIFO, a symlink loop or a huge file is left
        out, said through ``on_skip(path, error)``. A file that reads but does not parse is listed: its
        reader says so."""
        out = []
        for path in self._files(self.root / FINDINGS, None, None) + self._files(self.root / CASES, None, None):
            try:
                read_bytes(path)
            except SkippedFile as e:
                if on_skip is not None:
                    on_skip(path, e)
                continue
            except InvalidCase:
                pass
            out.append(path)
        return out

    def entries(self, target: str | None = None, *, on_bad=None) -> list[tuple[Path, Case, Finding | None]]:
        """Every finding, then every case, of ``target``: (path, case, finding or None).

        A file that cannot be read or parsed is moved to ``quarantine/`` and reported through
        ``on_bad(path, moved_to, error)``; one written by a newer fuzzrunner, and anything that is not
        a regular file of sane size (``SkippedFile``: a FIFO, a symlink loop), are reported and left in
        place (moved_to None); the others load on.
        """
        out = []
        skip = (lambda path, e: on_bad(path, None, e)) if on_bad is not None else None
        for path in self._files(self.findings_dir, target, skip) + self._files(self.root / CASES, target, skip):
            try:
                case, finding = load_any(path)
            except InvalidCase as e:  # a newer fuzzrunner's file, or not a file at all, is left where it is
                moved = None if isinstance(e, (NewerSchema, SkippedFile)) else self.quarantine(path)
                if on_bad is not None:
                    on_bad(path, moved, e)
                continue
            out.append((path, case, finding))
        return out

    def quarantine(self, path: Path) -> Path | None:
        """Move an unreadable file under ``quarantine/`` (same relative path); None if it cannot move."""
        try:  # abspath, not resolve(): the path may be a symlink loop, and moving moves the link itself
            rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(self.root))
        except ValueError:
            rel = Path(Path(path).name)
        dest = self.root / "quarantine" / rel
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)
        except OSError:
            return None
        return dest

    def database_path(self, target: str) -> Path:
        return self.root / "hypothesis" / safe_name(target)

    def hypothesis_home(self) -> Path | None:
        """Where Hypothesis keeps its own files (its cache of constants) during a campaign, instead of
        ``./.hypothesis`` in whatever directory the user ran from; None: a temporary folder."""
        return self.root / "hypothesis" / ".storage"


def safe_name(name: str) -> str:
    """A file or folder name made of letters, digits and ``-_.`` only."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:120]
