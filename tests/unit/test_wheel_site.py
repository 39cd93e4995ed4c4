"""``targets.wheel_site``: a release's files from its wheel, without compiled code but with what it reads."""

import zipfile
from importlib import import_module

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
