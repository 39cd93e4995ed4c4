"""``torch_effects.classify`` reads each op's schema once (a plan per op): what it says an op reads and
writes must be what a walk of the schema at each call says, for every op a program dispatches."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuzzrunner.oracles.shadow import torch_effects as fx


def _walk(func, args, kwargs):  # the schema walk classify made at every call before its plans
    if func in fx.NO_READ or getattr(func, "is_view", False) or fx._is_metadata_inplace(func):
        return [], []
    reads, writes = [], []
    for i, a in enumerate(func._schema.arguments):
        value = kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
        ts = fx._tensors(value)
        if not ts:
            continue
        if a.alias_info is not None and a.alias_info.is_write:
            writes += ts
            if not (func in fx.WRITE_ONLY or getattr(a, "is_out", False)):
                reads += ts
        else:
            reads += ts
    return reads, writes


class _Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((func, args, kwargs or {}))
        return func(*args, **(kwargs or {}))


def test_the_plan_says_what_the_schema_walk_says_for_every_op():
    a, b, out = torch.randn(4, 4), torch.randn(4, 4), torch.empty(4, 4)
    ix = torch.tensor([0, 2])
    with _Record() as rec:
        a + b
        a.add_(1)
        torch.add(a, b, out=out)
        torch.mm(a, b, out=out)
        out.copy_(a)
        out.fill_(2.0)
        out.zero_()
        a.t().contiguous()
        a.clone().transpose_(0, 1)
        a.index_select(0, ix)
        out.index_put_((ix,), torch.ones(2, 4), accumulate=True)
        out.index_copy_(0, ix, torch.ones(2, 4))
        torch.cat([a, b], out=torch.empty(8, 4))
        torch.where(a > 0, a, b)
        a.sum(dim=1, keepdim=True)
        torch.empty(3)
        a.view(16)[3:5]
        torch.embedding(a, ix)
        out.scatter_add_(0, ix.view(2, 1).expand(2, 4), b[:2])
        torch.max(a, 1)
    assert len({c[0] for c in rec.calls}) >= 18
    for func, args, kwargs in rec.calls:
        for _ in range(2):  # the first call makes the plan, the next reads it
            got, want = fx.classify(func, args, kwargs), _walk(func, args, kwargs)
            assert [list(map(id, x)) for x in got] == [list(map(id, x)) for x in want], func
