"""The V1 runner's prompt logprobs, as shipped: ``GPUModelRunner._get_prompt_logprobs_dict`` (vLLM up to 0.33).

After each step's forward the V1 runner's ``sample_tokens`` -> ``_bookkeeping_sync`` calls
``self._get_prompt_logprobs_dict(hidden_states[:num_scheduled_tokens], scheduler_output.num_scheduled_tokens)``
under the LoRA mapping ``_prepare_inputs`` made for the step (``set_active_loras``: one lm_head row per sampled
token). For every request of ``self.num_prompt_logprobs`` the step schedules, the method takes the request's rows
``hidden_states[offset : offset + num_logits]`` (``offset = self.query_start_loc.np[req_idx]``, the request's
index in the persistent ``InputBatch``) through ``self.model.compute_logits`` (so ``LogitsProcessorWithLoRA`` under
the step's mapping), scores them with the runner's ``Sampler`` (``compute_logprobs``, ``gather_logprobs``) against
the next prompt tokens, keeps a chunked prefill's chunks in ``LogprobsTensors.empty_cpu`` tensors (the request's
``in_progress_prompt_logprobs_cpu``; 0.15: the batch's dict) and returns them in the step that completes the prompt.

Here the method is vLLM's, called unbound on a stand-in of the runner holding what it reads, each vLLM's own object
where one exists: ``requests`` (the session's ``CachedRequestState``s, with the prompt's token ids), ``input_batch``
(the session's ``InputBatch``), ``sampler`` (vLLM's ``Sampler``, made as ``GPUModelRunner.__init__`` makes it),
``model_config``, ``device``. Re-stated: ``num_prompt_logprobs`` (two lines of ``_update_states``: a new request
whose ``SamplingParams.prompt_logprobs`` is set gets its k, -1 the vocabulary; a finished one is dropped),
``query_start_loc.np`` (``_prepare_inputs``' cumulative sum of the scheduled tokens, in the batch's order: the
runner's CPU half of a GPU buffer), ``model.compute_logits`` (the session's model, each call's rows checked) and
``_sync_device`` (a CUDA synchronize on a GPU; nothing to wait for on the CPU). ``LogprobsTensors.empty_cpu`` pins
its tensors where vLLM's ``PIN_MEMORY`` says (0.29 - 0.33; unpinned before): answered as for the whole target,
``vllm_env.unpin_host_memory`` (what vLLM's own CPU platform answers).

Oracles: those of the V2 runner's prompt logprobs (prompt_logprobs.py, ``Records``): each ``compute_logits``
call's rows against the float64 reference of that row's own adapter (``<label>.prompt_logits[k]``), and the output
against the specification (``<label>.prompt_logprobs``).
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np
import torch

from fuzzrunner.errors import InvalidCase

from .prompt_logprobs import Records


def find(runner_class) -> SimpleNamespace:
    """vLLM's ``GPUModelRunner._get_prompt_logprobs_dict`` and ``Sampler``; ``maps_prompt_rows``: the method programs
    the prompt rows' own lm_head mapping (a fix of P1's V1 form, vllm-project/vllm#51597: it reads the LoRA
    manager), else it takes the logits under the step's mapping, made for the sampled rows."""
    from vllm.v1.sample.sampler import Sampler
    source = inspect.getsource(runner_class._get_prompt_logprobs_dict)
    return SimpleNamespace(runner_class=runner_class, Sampler=Sampler, maps_prompt_rows="lora" in source.lower())


class _Runner:
    """What ``_get_prompt_logprobs_dict`` reads of ``GPUModelRunner`` (module docstring)."""

    def __init__(self, session, sampler):
        self.requests = session.cached
        self.input_batch = session.batch
        self.device = session.device
        self.model_config = session.cfg.model_config
        self.sampler = sampler
        self.num_prompt_logprobs: dict[str, int] = {}
        self.query_start_loc = SimpleNamespace(np=np.zeros(session.c["max_num_seqs"] + 1, dtype=np.int32))
        self.model = SimpleNamespace(compute_logits=None)

    def _sync_device(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class V1Prompts(Records):
    """The V1 runner's prompt logprobs for one session (v1_runner.V1Session): vLLM's method, and the oracle's records
    (a record index per live request, its own: the batch's indices move with ``condense`` and the reorder)."""

    def __init__(self, session, found: SimpleNamespace):
        rows = 4 * session.c["max_num_seqs"]
        super().__init__(session, rows)
        self.f = found
        self.runner = _Runner(session, found.Sampler(logprobs_mode=session.cfg.model_config.logprobs_mode))
        self.free = list(range(rows))[::-1]
        self.index: dict[str, int] = {}

    def add(self, r: dict) -> tuple[list[int], object]:
        """A new request: its record, its prompt's token ids and its ``SamplingParams`` (its ``CachedRequestState``'s);
        ``num_prompt_logprobs`` as ``_update_states`` sets it."""
        if r.get("score_ids") is not None or r.get("prompt_start") is not None:
            raise InvalidCase(f"request {r['id']!r}: score_ids / prompt_start are the V2 runner's prompt scoring; the "
                              f"V1 runner has none (drop them, or use runner 'v2').")
        if not self.free:
            raise InvalidCase(f"request {r['id']!r}: more than {len(self.index)} live requests in a V1-runner case.")
        index = self.free.pop()
        self.index[r["id"]] = index
        k = self.record(r, index)
        params = self.s.v1.SamplingParams(prompt_logprobs=k)
        if params.prompt_logprobs is not None:
            self.runner.num_prompt_logprobs[r["id"]] = (
                self.s.c["vocab"] if params.prompt_logprobs == -1 else params.prompt_logprobs)
        return self.all_token_ids[index, :int(self.prompt_len[index])].tolist(), params

    def remove(self, rid: str) -> None:
        """A finished request (``_update_states``: ``self.num_prompt_logprobs.pop(req_id, None)``)."""
        self.runner.num_prompt_logprobs.pop(rid, None)
        self.forget(rid)
        index = self.index.pop(rid, None)
        if index is not None:
            self.free.append(index)

    def run(self, label: str, hidden: torch.Tensor, ids: list[str], sched: np.ndarray, adapters: list[int]) -> None:
        """``_bookkeeping_sync``'s call on the step's hidden states (the batch's order ``ids``), then the oracles."""
        runner, n = self.runner, int(sched.sum())
        runner.query_start_loc.np[:] = 0
        np.cumsum(sched, out=runner.query_start_loc.np[1:len(ids) + 1])
        idx = np.array([self.index[i] for i in ids], dtype=np.int32)
        b = self.batch(ids, idx, sched)
        rows = [a for a, t in zip(adapters, sched) for _ in range(int(t))]
        seen: dict[int, torch.Tensor] = {}  # batch row -> the logits vLLM computed for it
        states = hidden[:n]
        runner.model.compute_logits = self._logits_fn(f"{label}.prompt_logits", states, rows, seen)
        # the class's method at call time (a planted fault replaces it: v1_faults.py), unbound on the stand-in
        out = self.f.runner_class._get_prompt_logprobs_dict(runner, states, {i: int(t) for i, t in zip(ids, sched)})
        self.check(label, out, b, seen)

    def step_done(self, ids: list[str], sched: np.ndarray) -> None:
        """After the step (whatever ran): the scheduled tokens are computed."""
        self.advance(np.array([self.index[i] for i in ids], dtype=np.int32), sched.astype(np.int32))
