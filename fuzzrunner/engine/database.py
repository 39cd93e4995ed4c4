"""The Hypothesis example database of a campaign: in the corpus unless another is plugged in.

Hypothesis keys examples by its test function, which is the same for every campaign of ours,
so keys are prefixed with the campaign's identity: the target, its planted faults, and the
seed when one was given. A seeded rerun then replays exactly its own earlier failures (and
stays reproducible); unseeded nightlies share their failures with each other. Any Hypothesis
database works underneath: a directory in the corpus, Redis, or a multiplexed one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from ..corpus import Corpus


class PrefixedDatabase(ExampleDatabase):
    """Another database seen through a key prefix."""

    def __init__(self, inner: ExampleDatabase, prefix: bytes):
        super().__init__()
        self.inner, self.prefix = inner, prefix

    def _key(self, key: bytes) -> bytes:
        return self.prefix + b"\x00" + key

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self._key(key), value)

    def fetch(self, key: bytes):
        return self.inner.fetch(self._key(key))

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self._key(key), value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self._key(src), self._key(dest), value)

    def __repr__(self) -> str:
        return f"PrefixedDatabase({self.inner!r}, {self.prefix!r})"


def campaign_database(plugged, corpus: Corpus | None, target: str, faults: tuple, seed: int | None):
    """The database a shard uses: ``plugged`` (any Hypothesis database) or the corpus' own, prefixed."""
    inner = plugged
    if inner is None and corpus is not None:
        inner = DirectoryBasedExampleDatabase(str(corpus.database_path(target)))
    if inner is None:
        return None
    prefix = f"{target}|{','.join(sorted(faults))}|{'*' if seed is None else seed}".encode("utf-8", "surrogatepass")
    return PrefixedDatabase(inner, prefix)


_HOME = "__hypothesis_home_directory"  # hypothesis.configuration's global; set_hypothesis_home_dir sets it


@contextmanager
def hypothesis_storage(corpus: Corpus | None) -> Iterator[None]:
    """Hypothesis' own files (its cache of the constants in local source files, written while it
    generates) go under the corpus, or a temporary folder, for the length of a campaign: not into a
    ``.hypothesis/`` folder in the user's working directory, which every run used to leave. A
    ``HYPOTHESIS_STORAGE_DIRECTORY`` the user set wins; the process's own setting is put back after
    (a pytest session's own Hypothesis tests keep theirs)."""
    from hypothesis import configuration
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        yield
        return
    before = getattr(configuration, _HOME, None)
    with ExitStack() as stack:
        # no corpus: a folder of this campaign's own, removed after it (a fixed fuzzrunner-hypothesis-UID
        # folder was left in TMPDIR by every campaign without a corpus: check-target, tests, the library)
        home = (corpus.hypothesis_home() if corpus is not None else None) or \
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fuzzrunner-hypothesis-")))
        configuration.set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(before)
