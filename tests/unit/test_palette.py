"""The case-shape palette (fuzzrunner/palette.py): a campaign's cases repeat a few shapes (so compiled kernel
variants repeat), and rotating the palette still reaches every shape of the space."""

from importlib import import_module

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hseed
from hypothesis import strategies as st

from fuzzrunner.errors import InvalidArgument
from fuzzrunner.palette import Palette, of_settings
from fuzzrunner.settings import Settings
from fuzzrunner.target import Target

vllm = import_module("fuzzrunner.targets.vllm_lora.cases")
vllm_runner = import_module("fuzzrunner.targets.vllm_lora.runner")
sglang = import_module("fuzzrunner.targets.sglang_lora.cases")
sglang_runner = import_module("fuzzrunner.targets.sglang_lora.runner")


def _vllm_shape(case) -> tuple:
    c = case.config
    return c["max_loras"], c["max_num_tokens"], c["hidden"], c["rank"], tuple(c["slices"]), c["dtype"]


def _sglang_shape(case) -> tuple:
    c = case.config
    return c["backend"], c["max_loras"], c["rank"], c["hidden"], c["out"], c["dtype"]


SPACES = [(vllm.shape_space(("float16", "bfloat16")), "vllm"), (sglang.shape_space(("triton", "csgmv"), ("float16",)),
                                                                "sglang")]


@pytest.mark.parametrize("space", [s for s, _ in SPACES] + [list(range(10)), list(range(3))], ids=lambda s: str(len(s)))
@pytest.mark.parametrize("size", [1, 4, 7])
def test_consecutive_rotations_cover_the_whole_space(space, size):
    palettes = [Palette(size, r).choose(space) for r in range(Palette(size, 0).rotations(len(space)))]
    assert all(len(p) == min(size, len(space)) and len(set(p)) == len(p) for p in palettes)
    assert set().union(*map(set, palettes)) == set(space)
    assert Palette(size, 5).choose(space) == Palette(size, 5).choose(space)  # one seed, one palette
    assert all(p == [s for s in space if s in p] for p in palettes)  # in the space's order: smallest first


def _drawn(strategy, n: int = 60) -> list:
    out = []

    @hseed(3)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case):
        out.append(case)
    collect()
    return out


@pytest.mark.parametrize("rotation", [0, 17])
def test_a_vllm_campaign_s_cases_repeat_its_palette_s_shapes_and_pad_as_vllm_pads(rotation):
    palette = Palette(4, rotation)
    drawn = _drawn(vllm.vllm_lora_cases(device="cuda", palette=palette))
    shapes = [_vllm_shape(c) for c in drawn]
    assert set(shapes) <= set(palette.choose(vllm.shape_space(vllm.DTYPES["cuda"])))
    assert len(set(shapes)) <= 4 < len(drawn)  # each kernel variant's shape comes again and again
    for case in drawn:
        vllm_runner.check(case)
        for op in case.ops:
            if op["op"] == "step":  # rows: the captured size that holds the tokens, as vLLM pads; else eager
                n, sizes = len(op["slots"]), case.config["capture_sizes"]
                assert n + op["pad"] == min([s for s in sizes if s >= n], default=n)
    free = {_vllm_shape(c) for c in _drawn(vllm.vllm_lora_cases(device="cuda"))}
    assert len(free) > 4  # without a palette the same draws spread over many more shapes


def test_an_sglang_campaign_s_cases_repeat_its_palette_s_shapes():
    palette = Palette(3, 2)
    drawn = _drawn(sglang.sglang_lora_cases(palette=palette))
    space = sglang.shape_space(("triton", "csgmv"), ("float16",))
    assert {_sglang_shape(c) for c in drawn} <= set(palette.choose(space)) and len(drawn) > 3
    for case in drawn:
        sglang_runner.check(case)


@pytest.mark.parametrize("which", [0, -1, 101])
def test_every_vllm_shape_is_drawn_by_the_rotation_that_holds_it(which):
    space = vllm.shape_space(vllm.DTYPES["cuda"])
    target = space[which]
    [rotation] = [r for r in range(Palette(4, 0).rotations(len(space))) if target in Palette(4, r).choose(space)][:1]
    from hypothesis import find
    case = find(vllm.vllm_lora_cases(device="cuda", palette=Palette(4, rotation)), lambda c: _vllm_shape(c) == target,
                settings=settings(database=None, max_examples=500))
    assert _vllm_shape(case) == target


def test_the_campaign_passes_its_palette_to_cases_that_take_one():
    seen = []

    def with_palette(faults=(), *, max_ops, palette=None):
        seen.append(palette)
        return st.nothing()

    def without(faults=(), *, max_ops):
        return st.nothing()

    run = lambda case, ctx: None  # noqa: E731
    Target("a", "", with_palette, run).strategy((), 4, device="cpu", palette=of_settings(6, 11))
    Target("b", "", without, run).strategy((), 4, device="cpu", palette=of_settings(6, 11))  # as before
    Target("a", "", with_palette, run).strategy((), 4, device="cpu", palette=of_settings(0, 11))
    assert seen == [Palette(6, 11), None]
    with pytest.raises(InvalidArgument, match=r"shape_palette=-1 \(--shape-palette\) must be a number of case shapes"):
        Settings(shape_palette=-1)
    with pytest.raises(InvalidArgument, match="palette size=0 must be"):
        Palette(0, 1)
