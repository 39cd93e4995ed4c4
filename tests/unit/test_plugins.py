"""Plug-ins (``fuzzrunner.plugins``): each entry point's callable runs once per process; a broken one is one
warning naming it; the off switch; registering twice is harmless; fuzzrunner's own names are not replaced."""

import sys
import types
from importlib.metadata import EntryPoint

import pytest

import fuzzrunner
from fuzzrunner import names, plugins
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.target import BUILTIN, register_target


@pytest.fixture
def fresh(monkeypatch):
    """``plugins.load`` as in a new process, over the entry points given; the registries restored after."""
    module = types.ModuleType("fuzzrunner_test_plugin")
    module.calls = []  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    saved = {id(r): dict(r) for r in (names.ORACLES, names.KINDS, names.TOOLS, BUILTIN)}

    def load(**entries):
        monkeypatch.setattr(plugins, "_loaded", None)
        eps = [EntryPoint(name, value, plugins.GROUP) for name, value in entries.items()]
        import importlib.metadata
        monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: eps if group == plugins.GROUP else [])
        return plugins.load()
    yield module, load
    for registry in (names.ORACLES, names.KINDS, names.TOOLS, BUILTIN):
        registry.clear()
        registry.update(saved[id(registry)])


def _register(module):
    def register():
        module.calls.append(1)
        fuzzrunner.register_kind(fuzzrunner.Kind("racy-read", 0, "racy-read", memory=True))
        fuzzrunner.register_oracle(fuzzrunner.OracleSpec("racer", "my_pkg:Racer", default_on=("cpu",)))
        fuzzrunner.register_tool(fuzzrunner.Tool("my-watchdog", process_death=True))
        fuzzrunner.register_target("my_runner", "my_pkg:TARGET")
    return register


def test_each_plug_in_registers_once_per_process_and_twice_is_harmless(fresh):
    module, load = fresh
    module.register = _register(module)
    assert load(mine=f"{module.__name__}:register") == ["mine"]
    assert plugins.load() == ["mine"] and module.calls == [1]  # once: a second load in the process does nothing
    module.register()  # the same registrations again (a forked child, a second entry point): harmless
    assert names.ORACLES["racer"].factory == "my_pkg:Racer" and names.tool("racer").name == "racer"
    assert "racer" in names.oracle_names() and names.validate_oracles(["racer"]) == ("racer",)
    assert names.kind("racy-read").memory and names.tool("my-watchdog").process_death
    assert BUILTIN["my_runner"] == "my_pkg:TARGET"


def test_a_broken_plug_in_is_one_warning_naming_it_and_the_others_load(fresh):
    module, load = fresh
    module.register = _register(module)
    module.raises = lambda: (_ for _ in ()).throw(RuntimeError("its own bug"))  # type: ignore[attr-defined]
    module.exits = lambda: sys.exit(3)  # type: ignore[attr-defined]
    module.needs_an_argument = lambda x: None  # type: ignore[attr-defined]
    with pytest.warns(plugins.PluginWarning) as seen:
        loaded = load(a_missing="no_such_module_anywhere:register", b_raises=f"{module.__name__}:raises",
                      c_exits=f"{module.__name__}:exits", d_args=f"{module.__name__}:needs_an_argument",
                      e_good=f"{module.__name__}:register")
    assert loaded == ["e_good"] and module.calls == [1]
    messages = [str(w.message) for w in seen]
    assert len(messages) == 4
    for name, why in (("a_missing", "ModuleNotFoundError"), ("b_raises", "RuntimeError: its own bug"),
                      ("c_exits", "SystemExit: 3"), ("d_args", "TypeError")):
        [line] = [m for m in messages if f"plug-in {name!r}" in m]
        assert why in line and "FUZZRUNNER_NO_PLUGINS=1" in line


def test_the_off_switch_loads_none(fresh, monkeypatch):
    module, load = fresh
    module.register = _register(module)
    monkeypatch.setenv("FUZZRUNNER_NO_PLUGINS", "1")
    assert load(mine=f"{module.__name__}:register") == [] and module.calls == []
    monkeypatch.setenv("FUZZRUNNER_NO_PLUGINS", "0")
    assert load(mine=f"{module.__name__}:register") == ["mine"]


def test_a_plug_in_cannot_replace_fuzzrunners_own_names(fresh):
    module, load = fresh
    for register, what in ((lambda: names.register_oracle(names.OracleSpec("shadow", "my_pkg:Mine")), "oracle"),
                           (lambda: names.register_kind(names.Kind("crash", 0, "mine")), "kind"),
                           (lambda: names.register_tool(names.Tool("cuda")), "tool"),
                           (lambda: register_target("reference_runner", "my_pkg:T"), "target")):
        with pytest.raises(InvalidArgument, match=f"fuzzrunner's own {what}"):
            register()
    names.register_oracle(names.ORACLES["shadow"])  # the same again: harmless
    module.bad = lambda: names.register_oracle(names.OracleSpec("shadow", "my_pkg:Mine"))  # type: ignore[attr-defined]
    with pytest.warns(plugins.PluginWarning, match="'shadow' is fuzzrunner's own oracle"):
        assert load(bad=f"{module.__name__}:bad") == []
    assert names.ORACLES["shadow"].factory == "fuzzrunner.oracles.shadow:shadow_oracle"
    with pytest.raises(InvalidArgument, match="a spec 'package.module:OBJ'"):
        register_target("mine", "no_colon")


def test_the_registries_names_come_from_the_front_door_without_torch():
    import subprocess
    code = ("import sys, fuzzrunner; fuzzrunner.register_oracle; fuzzrunner.Kind; fuzzrunner.Tool; "
            "fuzzrunner.register_target; fuzzrunner.Context; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "FUZZRUNNER_DEVICE": ""})
    assert out.stdout.strip() == "False", out.stderr[-2000:]
