"""Outputs that are strided views reach the byte-level comparisons of the poison oracle and of the shadow's torch
fallback: a view whose last dimension has one element passes as contiguous with a last stride other than 1, and a
strided 1-D view stays strided through ``reshape(-1)``; ``view(torch.uint8)`` refuses both. On an H100 this stopped
two vllm_engine workers: "HarnessError: worker failed outside the target: RuntimeError: self.stride(-1) must be 1 to
view Double as Byte (different element sizes), but got 3"."""

from __future__ import annotations

import pytest
import torch

from fuzzrunner.oracles.poison import _same
from fuzzrunner.oracles.shadow.torch_fallback import _Run


def _strided_views(dtype):
    base = torch.arange(24, dtype=torch.float64).to(dtype)
    yield "last dim of one, stride 4", base[:12].reshape(3, 4).t()[:, :1]
    yield "1-D, stride 3", base[::3]
    yield "one element, stride 3", base[::3][:1]  # .contiguous() keeps its stride (vLLM's, on the H100)
    yield "one element of a 2-D view", base[:12].reshape(4, 3)[1:2, :1].t()[:, :1]
    yield "0-dim", base[5]
    yield "transposed", base[:12].reshape(3, 4).t()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int32])
def test_poison_compares_strided_outputs_byte_for_byte(dtype):
    for what, view in _strided_views(dtype):
        assert _same(view, view.clone()), what
        other = view.clone()
        other[(0,) * other.dim()] += 1
        assert not _same(view, other), what


def test_the_torch_fallback_reads_the_bytes_of_a_strided_output():
    x = torch.arange(12, dtype=torch.float64)
    run = _Run(torch.ops.aten.slice.Tensor, (x, 0, 0, 12, 3), {}, {})
    assert run.out[0].view("float64").tolist() == [0.0, 3.0, 6.0, 9.0]
    one = _Run(torch.ops.aten.slice.Tensor, (x[::3], 0, 1, 2), {}, {})  # one element, stride 3
    assert one.out[0].view("float64").tolist() == [3.0]
