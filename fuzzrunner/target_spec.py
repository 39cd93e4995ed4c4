"""How a target is named, read in one place: a built-in name, ``FILE.py:OBJ`` or ``package.module:OBJ``.

The standard library only: the pytest plugin, which must stay light, reads specs too. Whether a spec
names a file (``is_file``) was spelt five ways (``.py`` only; ``.py`` or ``os.sep``; ``.py`` or ``/``),
so the loader, the CLI, the plugin and Ray's shipping could disagree about one spec.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class TargetSpec:
    """A target spec split once at its last ``:`` (a Windows drive's ``C:`` is part of the path)."""

    text: str    # as given
    module: str  # before the last ":": a file path or a dotted module; "" for a bare name
    obj: str     # after it: the Target (or factory) in that module; the whole text for a bare name

    @classmethod
    def parse(cls, spec: str) -> TargetSpec:
        module, sep, obj = spec.rpartition(":")
        return cls(spec, module, obj) if sep else cls(spec, "", spec)

    @property
    def is_name(self) -> bool:
        """A bare name (``reference_runner``: a built-in's, or the one a corpus case records), no module."""
        return ":" not in self.text

    @property
    def is_file(self) -> bool:
        """``FILE.py:OBJ``: its module is a path (a ``.py`` file, or anything with a folder in it), loaded
        from that file, never imported by name."""
        return not self.is_name and (self.module.endswith(".py") or "/" in self.module or os.sep in self.module)

    @property
    def file(self) -> str | None:
        """The path a file spec names (as given: relative or absolute); None for a module spec or a name."""
        return self.module if self.is_file else None

    def absolute(self, base: str | os.PathLike | None = None) -> str:
        """The spec with its file's path absolute (against ``base``, else the working directory), so that
        findings and repro scripts load it from anywhere; a module spec or a name as it is."""
        if not self.is_file:
            return self.text
        path = os.path.join(base, self.module) if base is not None else self.module
        return f"{os.path.abspath(path)}:{self.obj}"

    def __str__(self) -> str:
        return self.text
