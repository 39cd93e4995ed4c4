"""One Triton cache per machine and release (fuzzrunner/triton_cache.py): every worker of a campaign, and a later
campaign, find what the first put there, through Triton's own cache manager."""

import os

from fuzzrunner import triton_cache
from fuzzrunner.engine import run_campaign
from fuzzrunner.settings import Settings

# Each case asks Triton's cache manager (what compiled Triton reads and writes) for a marker: a cold cache is a
# state violation of the case that finds it missing, which then puts it there.
CACHED = '''
from hypothesis import strategies as st
from fuzzrunner.case import Case
from fuzzrunner.target import Target

def cases(faults=(), *, max_ops=5):
    return st.integers(0, 10**6).map(lambda n: Case("cached", {"n": n}, ({"op": "look"},), tuple(faults)))

def run(case, ctx):
    from triton.runtime.cache import get_cache_manager
    with ctx.op(0, case.ops[0]):
        cache = get_cache_manager("5" * 64)  # (a hash, as Triton keys its kernels)
        cold = cache.get_file("marker.txt") is None
        if cold:
            cache.put(b"compiled", "marker.txt", binary=True)
        ctx.check("triton cache", ["the Triton cache was cold"] if cold else [])

TARGET = Target("cached", "asks Triton's cache for a marker", cases, run,
                code_under_test={"engine": "eng", "release": "1.2"})
'''


def test_a_second_campaign_and_every_worker_find_the_first_campaign_s_triton_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv(triton_cache.ROOT_ENV, str(tmp_path / "tc"))
    (tmp_path / "cached_target.py").write_text(CACHED)
    spec = f"{tmp_path / 'cached_target.py'}:TARGET"
    first = run_campaign(spec, Settings(max_examples=4, seed=1, device="cpu", shrink=False), corpus_dir=tmp_path / "c1")
    assert [f.violation.message for f in first.findings] == ["op 0 (look): triton cache: the Triton cache was cold"]
    expected = os.path.join(tmp_path, "tc", f"triton-{triton_cache.triton_version()}", "eng-1.2", "cpu")
    assert any("marker.txt" in files for _, _, files in os.walk(expected))  # Triton wrote to the keyed folder
    second = run_campaign(spec, Settings(max_examples=4, seed=2, device="cpu", workers=2, shrink=False),
                          corpus_dir=tmp_path / "c2")
    assert second.examples >= 4 and second.findings == []  # both shards' workers, from their first case: warm


def test_the_user_s_triton_cache_dir_wins_and_off_leaves_triton_s_default(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    assert triton_cache.use({}, "cpu") == str(tmp_path / "mine")
    monkeypatch.delenv("TRITON_CACHE_DIR")
    monkeypatch.setenv(triton_cache.ROOT_ENV, "off")
    assert triton_cache.use({}, "cpu") is None and "TRITON_CACHE_DIR" not in os.environ
    monkeypatch.setenv(triton_cache.ROOT_ENV, str(tmp_path / "root"))
    path = triton_cache.use({"engine": "vllm", "release": "0.33.0/../x"}, "cpu")
    assert path == os.path.join(tmp_path, "root", f"triton-{triton_cache.triton_version()}", "vllm-0.33.0_.._x", "cpu")
    assert os.environ["TRITON_CACHE_DIR"] == path and os.path.isdir(path)
    monkeypatch.delenv("TRITON_CACHE_DIR")
    monkeypatch.delenv(triton_cache.ROOT_ENV)
    monkeypatch.setenv("FUZZRUNNER_CACHE_DIR", str(tmp_path / "fc"))
    assert triton_cache.folder({}, "cpu").startswith(os.path.join(tmp_path, "fc", "triton", "triton-"))
    assert triton_cache.folder({}, "cpu").endswith(os.path.join("fuzzrunner-" + triton_cache.__version__, "cpu"))


def test_a_cache_folder_that_cannot_be_made_is_said_not_ignored(tmp_path, monkeypatch):
    """A new user's FUZZRUNNER_TRITON_CACHE=/proc/x: the workers compile into Triton's default cache, and the
    campaign says so in one line naming the folder and the fix (it used to fall back in silence)."""
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder cannot be made below a file, whoever runs the test (root too)
    monkeypatch.setenv(triton_cache.ROOT_ENV, str(blocker / "tc"))
    r = run_campaign("reference_runner", Settings(max_examples=2, seed=1, device="cpu", shrink=False),
                     corpus_dir=tmp_path / "c")
    [said] = [w for w in r.warnings if triton_cache.ROOT_ENV in w]
    assert str(blocker / "tc") in said and "cannot be made" in said and "Triton's default cache" in said
    monkeypatch.setenv(triton_cache.ROOT_ENV, str(tmp_path / "ok"))
    assert triton_cache.unusable() == ""
    monkeypatch.setenv(triton_cache.ROOT_ENV, "off")
    assert triton_cache.unusable() == ""


def test_a_shape_palette_on_a_target_without_shapes_is_said_not_ignored(tmp_path):
    """--shape-palette on the reference runner (its cases take no palette) changed nothing, in silence."""
    r = run_campaign("reference_runner", Settings(max_examples=2, seed=1, device="cpu", shrink=False,
                                                  shape_palette=4), corpus_dir=tmp_path / "c")
    assert any("--shape-palette 4: target 'reference_runner' draws no case shapes" in w for w in r.warnings), \
        r.warnings
    quiet = run_campaign("reference_runner", Settings(max_examples=2, seed=1, device="cpu", shrink=False),
                         corpus_dir=tmp_path / "c2")
    assert not any("shape-palette" in w for w in quiet.warnings)


def test_a_cpu_campaign_that_compiles_nothing_leaves_no_empty_cache_folders(tmp_path, monkeypatch):
    """A new user's trial: every CPU run made ROOT/triton-V/RELEASE/cpu, empty (Triton's interpreter compiles
    nothing). The folder is proven makeable and removed; what does use Triton's cache makes it (the test above)."""
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv(triton_cache.ROOT_ENV, str(tmp_path / "tc"))
    r = run_campaign("lora_kernels", Settings(max_examples=2, seed=1, device="cpu", shrink=False),
                     corpus_dir=tmp_path / "c")
    assert r.examples >= 1 and not any(triton_cache.ROOT_ENV in w for w in r.warnings)
    assert not (tmp_path / "tc").exists(), [str(p) for p in (tmp_path / "tc").rglob("*")]
    # the worker's side, in this process: pointed at the folder, nothing made; where Triton compiles, made
    assert triton_cache.use({"engine": "e", "release": "1"}, "cpu", compiled=False) == os.environ["TRITON_CACHE_DIR"]
    assert not (tmp_path / "tc").exists()
    monkeypatch.delenv("TRITON_CACHE_DIR")
    assert os.path.isdir(triton_cache.use({"engine": "e", "release": "1"}, "cpu", compiled=True))
