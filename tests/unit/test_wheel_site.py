"""``targets.wheel_site``: a release's files from its wheel, without compiled code but with what it reads."""

import zipfile
from importlib import import_module

import pytest

wheel_site = import_module("fuzzrunner.targets.wheel_site")
KEEP = ("sglang/jit_kernel/",)
FILES = {"sglang/x.py": "x = 1", "sglang/_C.so": "elf", "sglang/csrc/k.cu": "kernel",
         "sglang/jit_kernel/include/a.h": "// header", "sglang/jit_kernel/csrc/b.cuh": "// kernel"}


def _wheel(tmp_path):
    whl = tmp_path / "sglang-0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for name, text in FILES.items():
            z.writestr(name, text)
    return whl


def test_compiled_code_is_left_out_but_sources_under_keep_are_extracted(tmp_path):
    site = tmp_path / "site"
    wheel_site.extract(_wheel(tmp_path), site, keep=KEEP)
    got = {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()}
    # 0.5.6 - 0.5.9's sglang.jit_kernel raises at import when its include/ and csrc/ folders are missing
    assert got == {"sglang/x.py", "sglang/jit_kernel/include/a.h", "sglang/jit_kernel/csrc/b.cuh"}


def test_a_tree_extracted_without_them_gets_the_kept_files(tmp_path):
    site = tmp_path / "site"
    whl = _wheel(tmp_path)
    wheel_site.extract(whl, site)
    assert not (site / "sglang/jit_kernel").exists()
    wheel_site.extract_kept(whl, site, KEEP)
    assert (site / "sglang/jit_kernel/include/a.h").read_text() == "// header"
    assert not (site / "sglang/csrc/k.cu").exists()


# -- missing_module: what the set-up's import loop installs next -------------------------------------------------

MODULES = {
    # pydantic_extra_types' pattern (vLLM 0.14's engine imports, through mistral_common): RuntimeError from the
    # ModuleNotFoundError of pycountry; the loop read ModuleNotFoundError only and the set-up ended without it
    "explicit": "try:\n    import absent_explicit\nexcept ModuleNotFoundError as e:\n"
                "    raise RuntimeError('requires \"absent_explicit\"') from e\n",
    "implicit": "try:\n    import absent_implicit.sub\nexcept ImportError:\n    raise ValueError('no backend')\n",
    "plain": "import absent_plain\n",
    "fine": "x = 1\n",
    "broken": "raise RuntimeError('a bug of its own, no module missing')\n",
}


def _probe(tmp_path, name):
    for mod, text in MODULES.items():
        (tmp_path / f"mod_{mod}.py").write_text(text)
    return wheel_site.missing_module("test_setup", f"sys.path[:0] = [{str(tmp_path)!r}]", (f"mod_{name}",), {})


@pytest.mark.parametrize("name, missing", [("explicit", "absent_explicit"), ("implicit", "absent_implicit"),
                                           ("plain", "absent_plain"), ("fine", None)])
def test_a_module_missing_under_another_error_is_named_to_install(tmp_path, name, missing):
    assert _probe(tmp_path, name) == missing


def test_an_import_that_fails_naming_no_module_ends_the_setup_in_one_line(tmp_path):
    with pytest.raises(SystemExit) as e:
        _probe(tmp_path, "broken")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("test_setup: importing mod_broken failed, naming no missing module")
    assert "RuntimeError: a bug of its own" in msg


def test_a_module_that_installing_does_not_provide_ends_the_setup_naming_it(tmp_path, monkeypatch):
    install = import_module("fuzzrunner.targets.vllm_lora.install")
    monkeypatch.setattr(install, "_missing_module", lambda site, deps, env, imports: "pycountry")
    monkeypatch.setattr(install, "pip", lambda *args: None)  # "installed", yet still missing
    with pytest.raises(SystemExit, match=r"imports the module 'pycountry', which installing 'pycountry' did not "
                                         r"provide; install the distribution that provides it"):
        install._top_up("9.9.9", tmp_path, tmp_path, {}, {})
