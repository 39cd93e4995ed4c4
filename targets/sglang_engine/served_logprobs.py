"""The logprobs SGLang's own result processing stores in a served request (``process_batch_result_prefill`` /
``_decode`` through its ``SchedulerLogprobResultProcessor``: ``req.logprob`` 0.5.23, the request's own fields
before), checked against the float64 reference of the request's own adapter, as a user reading the response would
check them:

* input logprobs (``return_logprob`` with ``logprob_start_len`` s of a prompt of n tokens): ``[None]`` then, for each
  position p from s to n - 2, the log-softmax of the reference logits at p taken at the prompt's token p + 1 (SGLang
  drops the last position's, which predicts the first output token, and has no value for position s itself); none
  where s = n. The rows come from every prefill chunk the request went through, at their positions in the prompt;
* output logprobs: for each generated token, the log-softmax of the reference logits of the row the token was
  sampled from, at that token.

Both relative to the row's largest reference logit, as the logits are (runner.Session._check_logprobs), under
``step.logprobs[<path>]`` (the backend and graph mode of the batch the values came from).
"""

from __future__ import annotations

import torch


def _lp(req):
    """Where the release keeps a request's logprob results: ``req.logprob`` (0.5.23), else the request itself."""
    return getattr(req, "logprob", None) or req


class Ledger:
    """One step's served requests' reference rows, and the checks of the logprobs SGLang stored for them."""

    def __init__(self, session):
        self.s = session
        self.rows: dict = {}   # rid -> {prompt position: (float64 log-softmax row, scale)}
        self.path: dict = {}   # rid -> the path label of its last prefill batch

    def before(self, batch) -> list:
        return [len(r.output_ids) for r in batch.reqs]

    def record(self, batch, fb, fw, before: list) -> None:
        """After a batch's result processing: keep each logprob request's reference rows of this batch (a prefill
        chunk's at their prompt positions) and check the output logprob of each token the batch appended."""
        extend = batch.forward_mode.is_extend()
        lens = list(fb.extend_seq_lens_cpu) if extend else [1] * len(batch.reqs)
        prefix = list(fb.extend_prefix_lens_cpu) if extend else [0] * len(batch.reqs)
        got, want, scales, off = [], [], [], 0
        for k, req in enumerate(batch.reqs):
            n = lens[k]
            if req.return_logprob:
                ref = fw.ref[off: off + n]
                lsm, scale = torch.log_softmax(ref, dim=-1), ref.abs().amax(dim=-1).clamp(min=1.0)
                if extend:
                    rows = self.rows.setdefault(req.rid, {})
                    for j in range(n):
                        rows[prefix[k] + j] = (lsm[j], scale[j])
                    self.path[req.rid] = fw.path
                vals = _lp(req).output_token_logprobs_val
                if len(req.output_ids) > before[k] and vals:
                    got.append(float(vals[-1]))
                    want.append(lsm[n - 1][req.output_ids[-1]])
                    scales.append(scale[n - 1])
            off += n
        if got:
            scale = torch.stack(scales)
            self.s.ctx.compare(f"step.logprobs[{fw.path}]", torch.tensor(got) / scale.float(),
                               torch.stack(want) / scale, self.s.compared_as)

    def finish(self, req, start: int) -> None:
        """A finished request's input logprobs (module doc), from its logprob start ``start``."""
        if not req.return_logprob:
            return
        prompt, rows = list(req.origin_input_ids), self.rows.get(req.rid, {})
        n, label = len(prompt), f"step.logprobs[{self.path.get(req.rid, '?')}]"
        got = list(_lp(req).input_token_logprobs_val or [])
        positions = list(range(start, n - 1))
        expected_len = n - start
        if len(got) != expected_len or (got and got[0] is not None):
            self.s.ctx.check(label, [f"request {req.rid} (logprob start {start}, {n} prompt tokens) got input logprobs "
                                     f"{[None if v is None else round(v, 4) for v in got[:6]]}... ({len(got)}), "
                                     f"asked {expected_len}: [None] then one per position {start}..{n - 2}"])
            return
        missing = [p for p in positions if p not in rows]
        if missing:
            raise RuntimeError(f"request {req.rid}: no reference rows kept for prompt positions {missing}")
        if not positions:
            return
        want = torch.stack([rows[p][0][prompt[p + 1]] for p in positions])
        scale = torch.stack([rows[p][1] for p in positions])
        self.s.ctx.compare(label, torch.tensor(got[1:], dtype=torch.float32) / scale.float(), want / scale,
                           self.s.compared_as)


__all__ = ["Ledger"]
