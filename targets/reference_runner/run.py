"""Running a reference_runner case: the runner under test beside the float64 reference model.

Ops: add_adapter(adapter_id, rank), remove_adapter(adapter_id), step(requests),
dummy_run(num_tokens, kind), capture(size), replay(requests); a request is
``{"adapter_id": int, "tokens": [int, ...]}``. Every step's hidden states and logits
are checked against the float64 reference model with each token's *intended* adapter;
a dummy run must give the no-adapter output.
"""

from __future__ import annotations

import torch

from fuzzrunner import tracking
from fuzzrunner.case import Case
from fuzzrunner.errors import InvalidArgument, InvalidCase
from fuzzrunner.kernels import KernelConfig
from fuzzrunner.runner import Faults, ModelRunner, ReferenceModel, Request, RunnerConfig
from fuzzrunner.runner.adapters import make_adapter


def _requests(op: dict) -> list[Request]:
    return [Request(r["adapter_id"], tuple(r["tokens"])) for r in op["requests"]]


class _Session:
    """One case: the runner under test, and what the reference needs to know."""

    def __init__(self, case: Case, ctx):
        try:
            self.config = RunnerConfig.from_dict(case.config)
            faults = Faults.from_names(case.faults)
        except InvalidArgument as e:
            raise InvalidCase(str(e)) from None
        self.runner = ModelRunner(self.config, device=ctx.device, faults=faults,
                                  kernel_config=KernelConfig(interpreted=ctx.context.interpreted))
        self.reference = ReferenceModel(self.config)
        self.ranks: dict[int, int] = {}
        self.dtype = getattr(torch, self.config.dtype)
        self.ctx = ctx

    def adapter(self, adapter_id: int):
        return make_adapter(self.config, adapter_id, self.ranks[adapter_id]) if adapter_id > 0 else None

    def check(self, out, *, no_adapters: bool = False) -> None:
        pick = (lambda a: None) if no_adapters else self.adapter
        with tracking.quiet():  # the harness's own float64 computation on the host: no oracle's business
            hidden, logits = self.reference.forward(out.input_ids, [pick(a) for a in out.token_adapters],
                                                    out.logits_rows, [pick(a) for a in out.row_adapters])
        self.ctx.compare("hidden", out.hidden, hidden, self.dtype)
        self.ctx.compare("logits", out.logits, logits, self.dtype)

    def apply(self, op: dict) -> None:
        kind, r = op["op"], self.runner
        if kind == "add_adapter":
            r.add_adapter(op["adapter_id"], op["rank"])
            self.ranks[op["adapter_id"]] = op["rank"]
        elif kind == "remove_adapter":
            r.remove_adapter(op["adapter_id"])
            del self.ranks[op["adapter_id"]]
        elif kind == "step":
            self.check(r.execute_model(_requests(op)))
        elif kind == "replay":
            self.check(r.replay(_requests(op)))
        elif kind == "dummy_run":
            self.check(r.dummy_run(op["num_tokens"], op["kind"]), no_adapters=True)
        elif kind == "capture":
            r.capture(op["size"])


def run(case: Case, ctx) -> None:
    session = _Session(case, ctx)
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            session.apply(op)
