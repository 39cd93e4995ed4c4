"""SGLang's own import-time warnings (on a machine without CUDA 0.5.23's quantization and attention modules warn
"Only CUDA, HIP and XPU support AWQ currently." and the like) are not shown by `fuzzrunner faults`, a campaign or an
exported repro: the target's load imports SGLang under ``site.quiet_imports``. Only those categories, only from
SGLang's modules, only while it loads: fuzzrunner's own warnings, the user's, other packages' and SGLang's at run
time still show. Without SGLang: its warnings are raised as from its modules (``warn_explicit``)."""

import types
import warnings
from importlib import import_module

import pytest

engine = import_module("fuzzrunner.targets.sglang_engine")
site = import_module("fuzzrunner.targets.sglang_lora.site")

SHOWN = [(UserWarning, "fuzzrunner.targets.sglang_engine.boot"),  # ours
         (UserWarning, "my_runner"),                               # the user's
         (UserWarning, "sglangish.util"),                          # not SGLang: the package name whole
         (FutureWarning, "transformers.utils.generic"),            # another package's
         (RuntimeWarning, "sglang.srt.layers.sampler")]            # SGLang's, of a category that may matter
HIDDEN = [(UserWarning, "sglang.srt.layers.quantization.awq.awq"), (UserWarning, "sglang.kernels.ops.attention.fla"),
          (DeprecationWarning, "sglang.srt.utils"), (PendingDeprecationWarning, "sglang.srt.configs"),
          (FutureWarning, "sglang")]


def _warn(category, module: str) -> None:
    warnings.warn_explicit(f"{category.__name__} of {module}", category, f"/{module.replace('.', '/')}.py", 1,
                           module=module, registry={})


def test_the_engines_load_hides_only_sglangs_own_import_warnings(monkeypatch):
    def import_engine():
        for category, module in SHOWN + HIDDEN:
            _warn(category, module)
        return types.SimpleNamespace(adapted=set())

    monkeypatch.setattr(engine, "_ENGINE", {})
    monkeypatch.setattr(engine, "_import_engine", import_engine)
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        engine.load_engine()
        assert [(w.category, str(w.message)) for w in seen] == [(c, f"{c.__name__} of {m}") for c, m in SHOWN]
        del seen[:]
        for category, module in HIDDEN:  # after the load (SGLang at run time): shown
            _warn(category, module)
        assert len(seen) == len(HIDDEN)
    assert warnings.filters == before


@pytest.mark.parametrize("package", ["sglang", "vllm"])
def test_quiet_imports_takes_the_package_whole_and_puts_the_filters_back(package):
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with site.quiet_imports(package):
            _warn(UserWarning, f"{package}.x")
            _warn(UserWarning, package)
            _warn(UserWarning, f"{package}_plugin")
        assert [str(w.message) for w in seen] == [f"UserWarning of {package}_plugin"]
    assert warnings.filters == before
