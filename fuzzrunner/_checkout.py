"""From a checkout (``PYTHONPATH=.``), ``fuzzrunner.targets`` is the top-level ``targets/`` folder.

An installed wheel maps that folder into the package (``package-dir`` in pyproject.toml), so the
wheel has one top-level package and a user's own ``targets`` package never collides with ours.
A checkout has no such mapping: this finder provides it, for that one name only.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_FOLDER = os.path.join(os.path.dirname(_HERE), "targets")
NAME = "fuzzrunner.targets"


class _TargetsFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME:
            return None
        return importlib.util.spec_from_file_location(NAME, os.path.join(_FOLDER, "__init__.py"),
                                                      submodule_search_locations=[_FOLDER])


def install() -> None:
    """Serve ``fuzzrunner.targets`` from the checkout, if this is one (idempotent)."""
    if os.path.isdir(os.path.join(_HERE, "targets")) or not os.path.isfile(os.path.join(_FOLDER, "__init__.py")):
        return
    if not any(isinstance(f, _TargetsFinder) for f in sys.meta_path):
        # First: an editable install of another checkout maps the name to *its* folder; the
        # folder beside the fuzzrunner actually imported is the one that belongs with it.
        sys.meta_path.insert(0, _TargetsFinder())
