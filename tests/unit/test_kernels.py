"""lora_shrink, lora_expand and lora_bgmv equal the float64 references in ``torch_ref``.

Metadata always comes from ``LoRAKernelMeta.prepare``, as the runner builds it. The
grid covers what vLLM's own kernel tests leave out (docs/background.md, vLLM 5.2): slot -1 mixed in,
the last slot, M = 0 and block boundaries, unequal slices, and a padded M past the
mapped tokens, whose rows must come back bit-identical.
"""

import pytest
import torch
import triton

from fuzzrunner import _env
from fuzzrunner.kernels import BlockSizes, KernelConfig, lora_bgmv, lora_expand, lora_shrink
from fuzzrunner.kernels.torch_ref import bgmv_ref, expand_ref, shrink_ref, tolerance
from fuzzrunner.runner.kernel_meta import LoRAKernelMeta, captured_lora_counts

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
SCALE = 0.5
MAX_LORAS = 4


class SmallBlocks(KernelConfig):
    """16-row blocks (and split-K 2 in shrink): M = 17 and 33 span several blocks on any device."""

    def shrink(self, M, R, K):
        return BlockSizes(16, 16, 16, split_k=2)

    def expand(self, M, N, R):
        return BlockSizes(16, 16, 16)

    def bgmv(self, M, N, R, K):
        cover = lambda n: max(16, triton.next_power_of_2(n))  # noqa: E731  (bgmv has no N or K loop)
        return BlockSizes(4, cover(N), cover(K))


CONFIGS = {
    "default": KernelConfig(interpreted=_env.interpreted()),
    "small": SmallBlocks(interpreted=_env.interpreted()),
}


# -- data ---------------------------------------------------------------------------------
def slots_for(n: int, max_loras: int = MAX_LORAS, seed: int = 0) -> torch.Tensor:
    """n slots cycling through -1, 0, .., max_loras-1, shuffled; slot 0 is the last slot, 1 is -1."""
    g = torch.Generator().manual_seed(seed)
    s = (torch.arange(n) % (max_loras + 1) - 1)[torch.randperm(n, generator=g)]
    if n >= 1:
        s[0] = max_loras - 1
    if n >= 2:
        s[1] = -1
    return s.to(torch.int32)


def padded_slots(n: int, M: int, seed: int = 0) -> torch.Tensor:
    """Slots of n mapped tokens, then -1 for the M - n padded ones."""
    return torch.cat([slots_for(n, seed=seed), torch.full((M - n,), -1, dtype=torch.int32)])


def randn(*shape, dtype=FP32, device="cpu", seed=0, scale=1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(device=device, dtype=dtype)


def prepared(slots: torch.Tensor, M: int, device, *, mapped_only: int | None = None,
             specialize: bool = False) -> LoRAKernelMeta:
    """Metadata for ``slots`` (length M). ``mapped_only=n`` prepares only the first n slots, as a
    runner that does not map its padding does; the unmapped tail of ``token_lora_mapping`` is
    then filled with a valid but wrong slot, which the sorted-metadata kernels must not use."""
    meta = LoRAKernelMeta.make("test", MAX_LORAS, max(M, 1), torch.device(device), specialize)
    if mapped_only is None:
        meta.prepare(slots.to(device))
    else:
        meta.token_lora_mapping.fill_(MAX_LORAS - 1)
        meta.token_indices_sorted_by_lora_ids.fill_(0)
        meta.prepare(slots[:mapped_only].to(device))
    return meta


def grid(meta: LoRAKernelMeta, specialize: bool = False) -> int:
    return meta.grid_width(specialize)


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    rtol, atol = tolerance(dtype)
    torch.testing.assert_close(actual.cpu().double(), expected, rtol=rtol, atol=atol)


# -- shrink -------------------------------------------------------------------------------
def check_shrink(device, *, M, n=None, R=8, S=2, K=48, dtype=FP32, config="default",
                 mapped_only=False, specialize=False, seed=0):
    n = M if n is None else n
    slots = padded_slots(n, M, seed)
    meta = prepared(slots, M, device, mapped_only=n if mapped_only else None, specialize=specialize)
    x = randn(M, K, dtype=dtype, device=device, seed=seed + 1)
    A = randn(S, MAX_LORAS, R, K, dtype=dtype, device=device, seed=seed + 2, scale=K ** -0.5)
    out = torch.full((S, M, R), float("nan"), device=device)  # shrink zeroes what it does not write
    lora_shrink(x, A, out, *meta.meta_args(M), grid(meta, specialize), SCALE, CONFIGS[config])
    assert_matches(out, shrink_ref(x.cpu(), A.cpu(), slots, SCALE), dtype)
    assert torch.equal(out[:, n:].cpu(), torch.zeros(S, M - n, R)), "padded rows must be exactly 0"


@pytest.mark.parametrize("config", ["default", "small"])
@pytest.mark.parametrize("M", [1, 15, 16, 17, 33, 65])
def test_shrink_token_counts(device, M, config):
    check_shrink(device, M=M, config=config, S=1)


@pytest.mark.parametrize("S", [1, 3])
@pytest.mark.parametrize("R", [1, 3, 8, 16, 64])
def test_shrink_ranks_and_slices(device, R, S):
    check_shrink(device, M=17, R=R, S=S, K=64 if R == 64 else 48, seed=R)


@pytest.mark.parametrize("mapped_only", [False, True], ids=["padding-mapped", "padding-unmapped"])
@pytest.mark.parametrize("n, M", [(3, 4), (5, 8), (15, 17), (17, 33)])
def test_shrink_padded_rows(device, n, M, mapped_only):
    check_shrink(device, M=M, n=n, mapped_only=mapped_only, config="small", seed=n)


@pytest.mark.parametrize("dtype", [FP16, BF16])
def test_shrink_half_precision(device, dtype):
    check_shrink(device, M=17, n=15, R=16, dtype=dtype)


def test_shrink_specialized_grid(device):
    check_shrink(device, M=17, specialize=True, config="small")


# -- expand -------------------------------------------------------------------------------
def check_expand(device, *, M, n=None, R=8, slice_n=(32, 16, 8), dtype=FP32, in_dtype=FP32,
                 add_inputs=True, config="default", mapped_only=False, specialize=False, seed=0):
    n = M if n is None else n
    slots = padded_slots(n, M, seed)
    meta = prepared(slots, M, device, mapped_only=n if mapped_only else None, specialize=specialize)
    S, MAX_N = len(slice_n), max(slice_n)
    x = randn(S, M, R, dtype=in_dtype, device=device, seed=seed + 1)
    B = randn(S, MAX_LORAS, MAX_N, R, dtype=dtype, device=device, seed=seed + 2, scale=R ** -0.5)
    for s, width in enumerate(slice_n):
        B[s, :, width:] = float("nan")  # a narrow slice's padding must never be read
    sn = torch.tensor(slice_n, dtype=torch.int32, device=device)
    offsets = torch.tensor([sum(slice_n[:s]) for s in range(S)], dtype=torch.int32, device=device)
    before = randn(M, sum(slice_n), dtype=dtype, device=device, seed=seed + 3)
    out = before.clone()
    lora_expand(x, B, out, *meta.meta_args(M), grid(meta, specialize), sn, offsets,
                CONFIGS[config], add_inputs=add_inputs)
    expected = expand_ref(x.cpu(), B.cpu(), before.cpu(), slots, sn.cpu(), offsets.cpu(), add_inputs)
    assert_matches(out, expected, dtype)
    untouched = slots == -1  # slot -1 and padded rows
    assert torch.equal(out.cpu()[untouched], before.cpu()[untouched]), "rows without an adapter changed"


@pytest.mark.parametrize("config", ["default", "small"])
@pytest.mark.parametrize("M", [1, 15, 16, 17, 33, 65])
def test_expand_token_counts(device, M, config):
    check_expand(device, M=M, config=config)


@pytest.mark.parametrize("R", [1, 3, 8, 16, 64])
def test_expand_ranks(device, R):
    check_expand(device, M=17, R=R, seed=R)


@pytest.mark.parametrize("add_inputs", [True, False])
@pytest.mark.parametrize("slice_n", [(40,), (32, 16), (32, 8, 24)])
def test_expand_unequal_slices(device, slice_n, add_inputs):
    check_expand(device, M=17, slice_n=slice_n, add_inputs=add_inputs, config="small")


@pytest.mark.parametrize("mapped_only", [False, True], ids=["padding-mapped", "padding-unmapped"])
@pytest.mark.parametrize("n, M", [(3, 4), (5, 8), (15, 17), (17, 33)])
def test_expand_padded_rows(device, n, M, mapped_only):
    check_expand(device, M=M, n=n, mapped_only=mapped_only, config="small", seed=n)


@pytest.mark.parametrize("dtype, in_dtype", [(FP16, FP32), (BF16, FP32), (BF16, BF16)])
def test_expand_half_precision(device, dtype, in_dtype):
    check_expand(device, M=17, n=15, R=16, slice_n=(32, 16), dtype=dtype, in_dtype=in_dtype)


def test_expand_specialized_grid(device):
    check_expand(device, M=17, specialize=True, config="small")


# -- bgmv ---------------------------------------------------------------------------------
def check_bgmv(device, *, M, n=None, R=8, K=32, N=40, dtype=FP32, config="default", seed=0):
    n = M if n is None else n
    slots = padded_slots(n, M, seed)
    meta = prepared(slots, M, device)
    x = randn(M, K, dtype=dtype, device=device, seed=seed + 1)
    A = randn(MAX_LORAS, R, K, dtype=dtype, device=device, seed=seed + 2, scale=K ** -0.5)
    B = randn(MAX_LORAS, N, R, dtype=dtype, device=device, seed=seed + 3, scale=R ** -0.5)
    before = randn(M, N, dtype=dtype, device=device, seed=seed + 4)
    out = before.clone()
    lora_bgmv(x, A, B, out, meta.token_lora_mapping[:M], SCALE, CONFIGS[config])
    assert_matches(out, bgmv_ref(x.cpu(), A.cpu(), B.cpu(), before.cpu(), slots, SCALE), dtype)
    untouched = slots == -1
    assert torch.equal(out.cpu()[untouched], before.cpu()[untouched]), "rows without an adapter changed"


@pytest.mark.parametrize("config", ["default", "small"])
@pytest.mark.parametrize("M", [1, 15, 16, 17, 33])
def test_bgmv_token_counts(device, M, config):
    check_bgmv(device, M=M, config=config)


@pytest.mark.parametrize("R", [1, 3, 8, 16, 64])
def test_bgmv_ranks(device, R):
    check_bgmv(device, M=17, R=R, seed=R)


@pytest.mark.parametrize("n, M", [(3, 4), (5, 8), (15, 17), (17, 33)])
def test_bgmv_padded_rows(device, n, M):
    check_bgmv(device, M=M, n=n, seed=n)


@pytest.mark.parametrize("dtype", [FP16, BF16])
def test_bgmv_half_precision(device, dtype):
    check_bgmv(device, M=6, n=5, dtype=dtype)


# -- the no-LoRA flag, empty batches, reused metadata ------------------------------------------
def test_no_lora_flag_leaves_outputs_untouched(device):
    """prepare() of an all -1 mapping sets the flag: shrink returns before zeroing, as vLLM's."""
    M, R, K, slice_n = 8, 8, 32, (32, 16)
    meta = prepared(torch.full((M,), -1, dtype=torch.int32), M, device)
    assert meta.no_lora_flag_cpu.item()
    x = randn(M, K, device=device)
    A = randn(1, MAX_LORAS, R, K, device=device, seed=1)
    B = randn(2, MAX_LORAS, max(slice_n), R, device=device, seed=2)
    shrunk, out = randn(1, M, R, device=device, seed=3), randn(M, sum(slice_n), device=device, seed=4)
    shrunk0, out0 = shrunk.clone(), out.clone()
    lora_shrink(x, A, shrunk, *meta.meta_args(M), grid(meta), SCALE, CONFIGS["default"])
    lora_expand(randn(2, M, R, device=device), B, out, *meta.meta_args(M), grid(meta),
                torch.tensor(slice_n, dtype=torch.int32, device=device),
                torch.tensor([0, 32], dtype=torch.int32, device=device), CONFIGS["default"])
    assert torch.equal(shrunk, shrunk0) and torch.equal(out, out0)


def test_no_lora_flag_wins_over_a_real_mapping(device):
    M, R, K = 8, 8, 32
    meta = prepared(slots_for(M), M, device)
    meta.no_lora_flag_cpu[0] = True
    x, A = randn(M, K, device=device), randn(1, MAX_LORAS, R, K, device=device, seed=1)
    shrunk = randn(1, M, R, device=device, seed=3)
    shrunk0 = shrunk.clone()
    lora_shrink(x, A, shrunk, *meta.meta_args(M), grid(meta), SCALE, CONFIGS["default"])
    out = randn(M, 32, device=device, seed=4)
    out0 = out.clone()
    lora_expand(shrunk, randn(1, MAX_LORAS, 32, R, device=device, seed=5), out, *meta.meta_args(M),
                grid(meta), torch.tensor([32], dtype=torch.int32, device=device),
                torch.tensor([0], dtype=torch.int32, device=device), CONFIGS["default"])
    assert torch.equal(shrunk, shrunk0) and torch.equal(out, out0)


def test_forced_launch_over_all_no_lora_is_harmless(device):
    """The #43139 dummy-run fix: all -1, flag forced False, full grid: every program exits on -1."""
    M, R, K, N = 8, 8, 32, 24
    meta = prepared(torch.full((M,), -1, dtype=torch.int32), M, device)
    meta.no_lora_flag_cpu[0] = False
    meta.num_active_loras_cpu[0] = 1
    x = randn(M, K, device=device)
    shrunk = randn(1, M, R, device=device, seed=1)
    lora_shrink(x, randn(1, MAX_LORAS, R, K, device=device, seed=2), shrunk, *meta.meta_args(M),
                grid(meta), SCALE, CONFIGS["default"])
    assert torch.equal(shrunk.cpu(), torch.zeros(1, M, R))
    out = randn(M, N, device=device, seed=3)
    out0 = out.clone()
    lora_expand(shrunk, randn(1, MAX_LORAS, N, R, device=device, seed=4), out, *meta.meta_args(M),
                grid(meta), torch.tensor([N], dtype=torch.int32, device=device),
                torch.tensor([0], dtype=torch.int32, device=device), CONFIGS["default"])
    lora_bgmv(x, randn(MAX_LORAS, R, K, device=device, seed=5), randn(MAX_LORAS, N, R, device=device, seed=6),
              out, meta.token_lora_mapping[:M], SCALE, CONFIGS["default"])
    assert torch.equal(out, out0)


def test_zero_tokens(device):
    meta = prepared(torch.zeros(0, dtype=torch.int32), 0, device)
    assert meta.no_lora_flag_cpu.item()
    meta.no_lora_flag_cpu[0] = False  # reach the M == 0 guards, not the flag's early return
    R, K, N = 8, 32, 16
    x, shrunk, out = torch.zeros(0, K, device=device), torch.zeros(1, 0, R, device=device), torch.zeros(0, N, device=device)
    lora_shrink(x, randn(1, MAX_LORAS, R, K, device=device), shrunk, *meta.meta_args(0), grid(meta), SCALE,
                CONFIGS["default"])
    lora_expand(shrunk, randn(1, MAX_LORAS, N, R, device=device), out, *meta.meta_args(0), grid(meta),
                torch.tensor([N], dtype=torch.int32, device=device),
                torch.tensor([0], dtype=torch.int32, device=device), CONFIGS["default"])
    lora_bgmv(x, randn(MAX_LORAS, R, K, device=device), randn(MAX_LORAS, N, R, device=device), out,
              meta.token_lora_mapping[:0], SCALE, CONFIGS["default"])
    assert out.shape == (0, N)


def test_metadata_reused_across_mappings(device):
    """One meta, programmed for a larger batch, then a smaller one, then all -1 (docs/background.md, vLLM 5.2)."""
    R, K, cap = 8, 32, 33
    meta = LoRAKernelMeta.make("test", MAX_LORAS, cap, torch.device(device))
    A = randn(1, MAX_LORAS, R, K, device=device, seed=1)
    for M, seed in ((33, 0), (5, 1)):
        slots = slots_for(M, seed=seed)
        meta.prepare(slots.to(device))
        x = randn(M, K, device=device, seed=seed + 10)
        out = torch.full((1, M, R), float("nan"), device=device)
        lora_shrink(x, A, out, *meta.meta_args(M), grid(meta), SCALE, CONFIGS["small"])
        assert_matches(out, shrink_ref(x.cpu(), A.cpu(), slots, SCALE), FP32)
    meta.prepare(torch.full((5,), -1, dtype=torch.int32, device=device))
    assert meta.no_lora_flag_cpu.item()
    assert meta.token_lora_mapping[:5].tolist() == [-1] * 5
    assert meta.active_lora_ids.tolist() == [-1] * (MAX_LORAS + 1)


# -- the metadata itself ----------------------------------------------------------------------
def test_kernel_meta_worked_example(device):
    """The example in kernel_meta's docstring, max_loras=2, slots [1, -1, 1, 0]."""
    meta = LoRAKernelMeta.make("test", 2, 8, torch.device(device))
    meta.prepare(torch.tensor([1, -1, 1, 0], dtype=torch.int32, device=device))
    assert meta.token_lora_mapping[:4].tolist() == [1, -1, 1, 0]
    assert meta.token_indices_sorted_by_lora_ids[:4].tolist() == [1, 3, 0, 2]
    assert meta.active_lora_ids.tolist() == [-1, 0, 1]
    assert meta.num_tokens_per_lora.tolist() == [1, 1, 2]
    assert meta.lora_token_start_loc.tolist() == [0, 1, 2, 4]
    assert not meta.no_lora_flag_cpu.item()
    assert meta.grid_width(specialize=False) == 3


@pytest.mark.parametrize("max_loras, specialize, counts", [
    (4, False, [5]), (4, True, [1, 2, 4, 5]), (3, True, [1, 2, 4]), (1, True, [1, 2]),
])
def test_captured_lora_counts(max_loras, specialize, counts):
    assert captured_lora_counts(max_loras, specialize) == counts


@pytest.mark.parametrize("slots, width", [([0, 0], 1), ([-1, 0], 2), ([-1, 0, 1], 4), ([-1, 0, 1, 2, 3], 5)])
def test_specialized_grid_rounds_up_to_a_captured_count(device, slots, width):
    meta = LoRAKernelMeta.make("test", MAX_LORAS, 8, torch.device(device), specialize=True)
    meta.prepare(torch.tensor(slots, dtype=torch.int32, device=device))
    assert meta.grid_width(specialize=True) == width
    assert meta.grid_width(specialize=False) == MAX_LORAS + 1


@pytest.mark.parametrize("K, N", [(256, 200), (200, 256)])
def test_bgmv_widest_shapes(device, K, N):
    check_bgmv(device, M=3, K=K, N=N)


@pytest.mark.parametrize("K, N", [(300, 40), (32, 300)])
def test_bgmv_refuses_shapes_it_would_truncate(device, K, N):
    """The kernel covers K and N with one block each; wider shapes used to be silently cut."""
    with pytest.raises(AssertionError, match="lora_bgmv needs"):
        check_bgmv(device, M=3, K=K, N=N)
