"""Plug-ins: a third party's oracles, violation kinds, tools and targets, registered in every fuzzrunner process.

A plug-in package names a callable that takes no arguments under the entry-point group ``fuzzrunner.plugins``
(docs/plugins.md)::

    [project.entry-points."fuzzrunner.plugins"]
    my_oracles = "my_package.fuzzrunner_plugin:register"

``load`` calls each once per process, when the ``fuzzrunner`` package is imported (``fuzzrunner/__init__.py``):
the CLI (before it builds its ``--oracle`` choices), the pytest plugin (before markers are read), campaign
workers and their zygote, shard processes, Ray actors and replay workers all import it first, so one
registration reaches the front end's choices and the workers that run the oracle alike, before any
``Settings`` is validated. A child forked from a process that loaded them inherits them (and does not call
them again). Registering the same thing twice is harmless (``names.register_*``, ``target.register_target``).
A plug-in that cannot be imported, or whose callable raises, is one warning naming it (``PluginWarning``),
never a crash: the others still load. ``FUZZRUNNER_NO_PLUGINS=1`` turns them all off.

Keep the callable light (the pytest plugin loads in every pytest session): register by name, as
``OracleSpec("mine", "my_package.oracle:MyOracle")``, so that the oracle's module (torch, Triton) is
imported where the oracle is made, in the worker. Standard library only.
"""

from __future__ import annotations

import os
import warnings

GROUP = "fuzzrunner.plugins"
OFF_ENV = "FUZZRUNNER_NO_PLUGINS"   # set (not "" or "0"): no plug-in is loaded, as HYPOTHESIS_NO_PLUGINS


class PluginWarning(UserWarning):
    """A plug-in that failed to load: skipped, named, the rest of fuzzrunner unaffected."""


_loaded: list[str] | None = None   # this process's loaded plug-ins (None: not loaded yet)


def load() -> list[str]:
    """Call every plug-in's registration once in this process; the names of those that loaded."""
    global _loaded
    if _loaded is not None:
        return _loaded
    _loaded = []
    if os.environ.get(OFF_ENV, "").strip() not in ("", "0"):
        return _loaded
    try:
        from importlib.metadata import entry_points
        found = sorted(entry_points(group=GROUP), key=lambda ep: ep.name)
    except Exception as e:  # noqa: BLE001 - a broken installation's metadata: said, never fatal
        _warn(f"the entry points of {GROUP!r} could not be read ({type(e).__name__}: {e}); no plug-in loaded")
        return _loaded
    for ep in found:
        try:
            ep.load()()
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a plug-in's failure is its own, said once
            text = f"{type(e).__name__}: {e}".strip().splitlines()[0][:300]
            _warn(f"plug-in {ep.name!r} ({ep.value}) failed to load and is left out: {text}")
            continue
        _loaded.append(ep.name)
    return _loaded


def _warn(message: str) -> None:
    warnings.warn(f"fuzzrunner: {message} ({OFF_ENV}=1 turns plug-ins off)", PluginWarning, stacklevel=3)
